"""Writes of sessions and operations: what the API and the workers call."""
