"""Metrics (Prometheus) and structured logs (structlog) for every Loopwright process."""
