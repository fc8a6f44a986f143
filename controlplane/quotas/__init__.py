"""Per-tenant quotas: the limits (concurrent sessions, API request rate, monthly token budget;
defaults from settings) and the request-rate counter. The session-slot check lives with the
sessions it counts, the budget check with the tokens metering counts."""
