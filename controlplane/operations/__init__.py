"""The life of an operation, in one place: submitted (checked, ordered by ``seq_id``, inserted
exactly once), claimed by its worker, completed with its usage rows or failed, and heard of by
whoever waits for it.

Sits above training sessions, metering, the registry and quotas, below billing and the APIs;
the workers call it to claim and complete. Where PostgreSQL allows a step in one statement,
the step's own entry point takes that path and falls back to the portable one by itself.
"""
