"""Loopwright GPU workers: the engine (pure torch) and the Celery layer around it."""
