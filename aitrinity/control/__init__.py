"""The Controller: telemetry in, a re-diagnosis each period, a switch when it pays (shared by systems and sim)."""

from aitrinity.control.controller import Controller, Decision
from aitrinity.control.telemetry import Rates, Telemetry

__all__ = ["Controller", "Decision", "Rates", "Telemetry"]
