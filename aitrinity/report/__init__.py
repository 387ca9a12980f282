"""Reports: what the library found, as typed data (:mod:`.figures`) drawn as one self-contained HTML page
(:mod:`.html`, charts from :mod:`.svg`)."""

from aitrinity.report.figures import Figure, Report, Section, Table, build
from aitrinity.report.html import page

__all__ = ["Figure", "Report", "Section", "Table", "build", "page"]
