"""Per-tenant quotas: concurrent sessions and API request rate (defaults from settings)."""
