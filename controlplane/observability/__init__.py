"""``/metrics`` (the process's counters from ``controlplane.metrics`` and the database's numbers),
request ids and structured logs (structlog) for every Loopwright process."""
