"""Work that sweeps across the apps: the janitor (failover, expiry, placement of what waits,
pruning, the usage push) and the one-machine launcher that runs it beside the service."""
