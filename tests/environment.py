"""Loaded before Django is (``-p tests.environment`` in pyproject.toml): the test processes'
secrets, from the environment as production has them, made for this run when unset. Every
stack and subprocess a test starts inherits them unless it sets its own."""

import os
import secrets

for _name in ("DJANGO_SECRET_KEY", "LOOPWRIGHT_KMS_MASTER_KEY"):
    os.environ.setdefault(_name, secrets.token_urlsafe(48))
