"""The life of an operation, in one place: submitted (checked, ordered by ``seq_id``, inserted
exactly once), claimed by its worker, completed with its usage rows or failed, and heard of by
whoever waits for it.

Sits above training sessions, metering, the registry and quotas, below billing and the APIs;
the workers claim and complete through it. Where PostgreSQL does a step in one statement, the
step's entry point chooses that path or the portable one itself (``claim.claim_runnable``,
``complete.complete``, and ``training.submit`` for a training step).
"""
