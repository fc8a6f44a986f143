"""The audit log: every authorization decision and every mutating call, per tenant."""
