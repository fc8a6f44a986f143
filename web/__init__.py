"""The dashboard (server-rendered Django). For now: the service's status page."""
