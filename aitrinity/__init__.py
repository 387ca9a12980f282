"""aitrinity: computation, bandwidth and memory as exchangeable currencies of AI infrastructure."""

__version__ = "0.1.0"
