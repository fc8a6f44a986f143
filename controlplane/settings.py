"""Control-plane settings, read from the environment (django-environ).

Embedded default: SQLite and a filesystem broker under ``LOOPWRIGHT_DATA_DIR`` (./var), so the
whole service runs without a database or broker server. Set ``DATABASE_URL``
(``postgres://user@host:5432/name``) and ``LOOPWRIGHT_BROKER_URL`` (``redis://...`` or
``amqp://...``) in CI and production.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import environ

from controlplane import install_secrets
from controlplane.observability.logs import logging_config

BASE_DIR = Path(__file__).resolve().parent.parent
env = environ.Env()

DATA_DIR = Path(env.str("LOOPWRIGHT_DATA_DIR", default=str(BASE_DIR / "var")))
DEBUG = env.bool("DJANGO_DEBUG", default=False)
# No secret has a default: each comes from the environment or, on the embedded default (no
# DATABASE_URL: SQLite, one machine) or with DEBUG, is made once into DATA_DIR (mode 0600).
# Production (PostgreSQL, DEBUG off) refuses to start without it (docs/security.md, "Secrets").
EMBEDDED = not env.str("DATABASE_URL", default="")
_secrets = install_secrets.Resolver(env.ENVIRON, DATA_DIR, generate=EMBEDDED or DEBUG)
SECRET_KEY = _secrets.secret(
    "DJANGO_SECRET_KEY",
    install_secrets.SECRET_KEY_FILE,
    what="it signs logins and download links and keys the digests of API keys",
)
# Earlier secrets, still accepted while a rotation completes (docs/security.md).
SECRET_KEY_FALLBACKS = _secrets.listed(
    "DJANGO_SECRET_KEY_FALLBACKS", install_secrets.SECRET_KEY_FALLBACKS_FILE
)
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "testserver"])

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI's files, served by the app itself (no CDN)
    "controlplane.tenants",
    "controlplane.iam",
    "controlplane.audit",
    "controlplane.fleet",
    "controlplane.training_sessions",
    "controlplane.kms",
    "controlplane.access_keys",
    "controlplane.sagemaker_sessions",
    "controlplane.registry",
    "controlplane.metering",
    "controlplane.quotas",
    "controlplane.budgets",
    "controlplane.billing",
    "controlplane.housekeeping",
    "controlplane.api",
    "web",
]

MIDDLEWARE = [
    "controlplane.observability.middleware.RequestIdMiddleware",
    "controlplane.api.middleware.BodyDrainMiddleware",
    "controlplane.api.middleware.ServerTimingMiddleware",
    "controlplane.api.middleware.BodySizeLimitMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "controlplane.edge.headers.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "controlplane.audit.outcomes.AuditOutcomeMiddleware",
]

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.csrf",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "web.context_processors.dashboard",
            ]
        },
    }
]

ROOT_URLCONF = "controlplane.urls"
# The dashboard's CSS and JS, served by the app itself (WhiteNoise): no CDN, no extra server.
STATIC_URL = "/static/"
# Only for `manage.py collectstatic` (a CDN or proxy in front); unset, files come from the apps.
STATIC_ROOT = env.str("LOOPWRIGHT_STATIC_ROOT", default="") or None
WHITENOISE_USE_FINDERS = True  # straight from the apps' static folders; no collectstatic step
LOGIN_URL = "/login"
WSGI_APPLICATION = "controlplane.wsgi.application"

DATABASES = {
    "default": env.db("DATABASE_URL", default=f"sqlite:///{DATA_DIR / 'loopwright.sqlite3'}"),
}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # Many threads (long polls) and a worker process share one file: wait for locks, don't fail.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "timeout": 30,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    )
    # Tests get a file too (one per process), not Django's in-memory shared cache: there one
    # thread's write makes another's query fail at once with "database table is locked",
    # whatever the timeout (the worker's heartbeat thread writes while a test reads).
    DATABASES["default"].setdefault("TEST", {}).setdefault(
        "NAME", str(Path(tempfile.gettempdir()) / f"loopwright-test-{os.getpid()}.sqlite3")
    )
elif DATABASES["default"]["ENGINE"].endswith("postgresql") and env.bool(
    "DATABASE_SERVER_SIDE_BINDING", default=True
):
    # Parameters bound on the server, and a statement a connection has run 5 times prepared:
    # PostgreSQL then plans it once (a generic plan, where that costs no more than planning each
    # call). A connection pooler in front must keep prepared statements or pool by session.
    pg_options = DATABASES["default"].setdefault("OPTIONS", {})
    pg_options.setdefault("server_side_binding", True)
    pg_options.setdefault("prepare_threshold", 5)
DATABASES["default"]["CONN_MAX_AGE"] = env.int("DATABASE_CONN_MAX_AGE", default=60)
# A kept connection is checked before a request reuses it: after a database restart the first
# request reconnects instead of failing.
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

USE_TZ = True
TIME_ZONE = "UTC"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "controlplane.iam.authentication.ApiKeyAuthentication",
        "controlplane.iam.authentication.LoginSessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "UNAUTHENTICATED_USER": None,
    "EXCEPTION_HANDLER": "controlplane.edge.errors.exception_handler",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["controlplane.api.json_body.JSONBodyParser"],
    "DEFAULT_THROTTLE_CLASSES": ["controlplane.quotas.throttling.TenantRateThrottle"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}

# The OpenAPI document of /api/v1 and /v1 (controlplane/openapi.py), at /api/v1/schema
SPECTACULAR_SETTINGS = {
    "TITLE": "Loopwright API",
    "DESCRIPTION": (
        "Training sessions over the Tinker protocol (/api/v1), Loopwright's own resources "
        "(/api/v1), OpenAI-compatible sampling (/v1) and Anthropic's Messages (/v1/messages). "
        "Every bound is stated on its field; "
        "docs/limits.md lists them all."
    ),
    "VERSION": "1",
    "OAS_VERSION": "3.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "SCHEMA_PATH_PREFIX": "/",
    "POSTPROCESSING_HOOKS": [],  # enums stay on their fields, as the models declare them
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {
        "NAME": "django.contrib.auth.password_validation.MinimumLengthValidator",
        "OPTIONS": {"min_length": 10},
    },
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
X_FRAME_OPTIONS = "DENY"  # with the CSP's frame-ancestors 'none': no page is framed
# Served over HTTPS by a proxy that terminates TLS and sets X-Forwarded-Proto (on in
# infra/compose.yaml and the chart; docs/security.md, "Headers, cookies and TLS"): Secure
# cookies, HSTS, plain HTTP redirected, and the proxy's X-Forwarded-Proto believed, so that
# request.is_secure() and the condition key loopwright:SecureTransport are true behind it. Off,
# X-Forwarded-Proto is never believed.
TLS_PROXY = env.bool("LOOPWRIGHT_TLS_PROXY", default=False)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = TLS_PROXY
if TLS_PROXY:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = True
    # probes and scrapes reach the pods themselves, in plain HTTP
    SECURE_REDIRECT_EXEMPT = [r"^api/v1/healthz$", r"^metrics$"]
    SECURE_HSTS_SECONDS = env.int("LOOPWRIGHT_HSTS_SECONDS", default=365 * 24 * 3600)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("LOOPWRIGHT_HSTS_INCLUDE_SUBDOMAINS", default=True)
    SECURE_HSTS_PRELOAD = env.bool("LOOPWRIGHT_HSTS_PRELOAD", default=False)
SILENCED_SYSTEM_CHECKS = [
    # HSTS preload: submitting a domain to the browsers' preload list binds every subdomain for
    # months and is the operator's decision (LOOPWRIGHT_HSTS_PRELOAD), not a default.
    "security.W021",
]

# -- Loopwright ----------------------------------------------------------------------------
BROKER_URL = env.str("LOOPWRIGHT_BROKER_URL", default="filesystem://")
BROKER_DIR = DATA_DIR / "broker"
STORAGE_DIR = Path(env.str("LOOPWRIGHT_STORAGE_DIR", default=str(DATA_DIR / "storage")))
# Sessions with an s3_output_path keep their checkpoints there; credentials: the AWS chain.
S3_ENDPOINT_URL = env.str("LOOPWRIGHT_S3_ENDPOINT_URL", default="") or None
S3_REGION = env.str("LOOPWRIGHT_S3_REGION", default="us-east-1")
# Downloads of model packages open checkpoints here (a private folder each); system temp if unset.
DOWNLOAD_SCRATCH_DIR = env.str("LOOPWRIGHT_DOWNLOAD_SCRATCH_DIR", default="") or None
# Signed download links (external_weights_urls) expire after this many seconds.
DOWNLOAD_LINK_SECONDS = env.int("LOOPWRIGHT_DOWNLOAD_LINK_SECONDS", default=3600)
MAX_REQUEST_BYTES = env.int("LOOPWRIGHT_MAX_REQUEST_BYTES", default=64 * 1024 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = MAX_REQUEST_BYTES
LONG_POLL_SECONDS = env.float("LOOPWRIGHT_LONG_POLL_SECONDS", default=25.0)
# On PostgreSQL, long polls wake on NOTIFY from the worker instead of polling the database.
NOTIFY_ON_COMPLETION = env.bool("LOOPWRIGHT_NOTIFY_ON_COMPLETION", default=True)
# How long /v1/chat/completions and /v1/completions wait for their sample operations (504 after).
OPENAI_WAIT_SECONDS = env.float("LOOPWRIGHT_OPENAI_WAIT_SECONDS", default=300.0)
# On PostgreSQL, /v1 streams send tokens as the worker draws them (NOTIFY per operation); the
# worker sends what it drew at most this often. Off, or elsewhere: sent once the request is done.
STREAM_TOKENS = env.bool("LOOPWRIGHT_STREAM_TOKENS", default=True)
STREAM_FLUSH_SECONDS = env.float("LOOPWRIGHT_STREAM_FLUSH_SECONDS", default=0.02)
# A stream with nothing to send for this long sends an SSE comment (proxies keep it open).
STREAM_KEEPALIVE_SECONDS = env.float("LOOPWRIGHT_STREAM_KEEPALIVE_SECONDS", default=15.0)
# Seconds a control-plane process may reuse what an API key resolved to (PostgreSQL only; IAM
# changes clear every process's cache at commit). 0: look it up on every request.
AUTH_CACHE_SECONDS = env.float("LOOPWRIGHT_AUTH_CACHE_SECONDS", default=30.0)
# On PostgreSQL, a submit wakes its worker with NOTIFY at commit (no broker hop); the worker's
# Celery queue still carries start-up and heartbeat nudges. False: every nudge goes via Celery.
WAKE_WORKERS_BY_NOTIFY = env.bool("LOOPWRIGHT_WAKE_WORKERS_BY_NOTIFY", default=True)
# A training request may be at most this many seq_ids ahead of the one its model runs next
# (400 beyond); a seq_id that never arrives while later ones wait this long is recorded as
# missing, with the rest of its gap, in one row (docs/limits.md).
SEQ_WINDOW = env.int("LOOPWRIGHT_SEQ_WINDOW", default=10_000)
SEQ_GAP_SECONDS = env.float("LOOPWRIGHT_SEQ_GAP_SECONDS", default=120.0)
SESSION_IDLE_TIMEOUT_SECONDS = env.int("LOOPWRIGHT_SESSION_IDLE_TIMEOUT", default=15 * 60)
# A worker holds a lease this long, renewed by its heartbeat (every fifth of it); one silent
# past it is declared dead and its models move to live workers (docs/failover.md).
WORKER_LEASE_SECONDS = env.float("LOOPWRIGHT_WORKER_LEASE_SECONDS", default=10.0)
# A sharded group's members load their base whole (again, after an earlier group) and shard it
# while the group forms; one not ready within this many seconds ends (docs/scaling.md).
SHARDED_GROUP_FORM_SECONDS = env.float("LOOPWRIGHT_SHARDED_GROUP_FORM_SECONDS", default=600.0)
# The service snapshots each training model (adapter, AdamW state, pending gradients) every so
# many optimizer steps or seconds, whichever comes first (0 turns that trigger off); a model
# lost with its worker is restored from it and replays the operations completed since.
SNAPSHOT_EVERY_STEPS = env.int("LOOPWRIGHT_SNAPSHOT_EVERY_STEPS", default=20)
SNAPSHOT_EVERY_SECONDS = env.float("LOOPWRIGHT_SNAPSHOT_EVERY_SECONDS", default=120.0)
# A stopping worker finishes its operation, snapshots and hands over within this many seconds.
WORKER_STOP_SECONDS = env.float("LOOPWRIGHT_WORKER_STOP_SECONDS", default=60.0)
# The HTTP server (controlplane/serving, infra/README.md): a request's headers and whole body
# must arrive within this many seconds (408 past it); open connections per client address in
# each server process (0: no cap; not applied behind LOOPWRIGHT_TRUSTED_PROXIES).
HTTP_REQUEST_DEADLINE_SECONDS = env.float("LOOPWRIGHT_HTTP_REQUEST_DEADLINE", default=60.0)
HTTP_MAX_CONNECTIONS_PER_ADDRESS = env.int(
    "LOOPWRIGHT_HTTP_MAX_CONNECTIONS_PER_ADDRESS", default=64
)
# Hops of X-Forwarded-For written by proxies we run (0: believe only the socket's address).
TRUSTED_PROXIES = env.int("LOOPWRIGHT_TRUSTED_PROXIES", default=0)
AUDIT_RETENTION_DAYS = env.int("LOOPWRIGHT_AUDIT_RETENTION_DAYS", default=400)
# Password logins: this many failures of one account from one address in the window throttle it
LOGIN_FAILURE_LIMIT = env.int("LOOPWRIGHT_LOGIN_FAILURE_LIMIT", default=5)
LOGIN_FAILURE_WINDOW_SECONDS = env.int("LOOPWRIGHT_LOGIN_FAILURE_WINDOW", default=15 * 60)
# ... and this many from one address, whatever the accounts (docs/security.md, "Abuse limits").
LOGIN_ADDRESS_FAILURE_LIMIT = env.int(
    "LOOPWRIGHT_LOGIN_ADDRESS_FAILURE_LIMIT", default=4 * LOGIN_FAILURE_LIMIT
)
# Sign-ups: this many per address, and in all, within the window (429 with Retry-After past it).
SIGNUP_ADDRESS_LIMIT = env.int("LOOPWRIGHT_SIGNUP_ADDRESS_LIMIT", default=10)
SIGNUP_LIMIT = env.int("LOOPWRIGHT_SIGNUP_LIMIT", default=200)
SIGNUP_WINDOW_SECONDS = env.int("LOOPWRIGHT_SIGNUP_WINDOW", default=60 * 60)
INVITATION_TTL_DAYS = env.int("LOOPWRIGHT_INVITATION_TTL_DAYS", default=7)
# Per-tenant quotas (docs/quotas.md); manage.py set_quota overrides them for one account.
MAX_CONCURRENT_SESSIONS = env.int("LOOPWRIGHT_MAX_CONCURRENT_SESSIONS", default=10)
REQUESTS_PER_MINUTE = env.int("LOOPWRIGHT_REQUESTS_PER_MINUTE", default=6000)
# Tokens per calendar month (UTC) per tenant; unset: unlimited.
MONTHLY_TOKEN_BUDGET = env.int("LOOPWRIGHT_MONTHLY_TOKEN_BUDGET", default=None)
# The most data-parallel replicas (workers) one training model may ask for.
MAX_REPLICAS = env.int("LOOPWRIGHT_MAX_REPLICAS", default=8)
# Bytes of recorded sampled sequences (record_stability_info) a tenant may keep at once, and how
# long one stays citable after its last use (docs/tinker-protocol.md, "Recorded sampling").
MAX_RECORDED_BYTES = env.int("LOOPWRIGHT_MAX_RECORDED_BYTES", default=1024**3)
RECORDED_SEQUENCE_SECONDS = env.int("LOOPWRIGHT_RECORDED_SEQUENCE_SECONDS", default=24 * 3600)
RATE_LIMIT_REDIS_URL = env.str("LOOPWRIGHT_RATE_LIMIT_REDIS_URL", default="") or (
    BROKER_URL if BROKER_URL.startswith(("redis://", "rediss://")) else ""
)
# Wraps every local KMS key's material (and every secret the service seals for itself); never
# derived from SECRET_KEY. Moved to a new one by `manage.py rotate_kms_master_key`, which re-wraps
# under it what the previous one wrapped (docs/security.md, "Rotating secrets").
KMS_MASTER_KEY = install_secrets.kms_master_key_checked(
    _secrets.secret(
        "LOOPWRIGHT_KMS_MASTER_KEY",
        install_secrets.KMS_MASTER_KEY_FILE,
        what="it wraps every local KMS key, so it unlocks every sealed checkpoint",
    ),
    secret_key=SECRET_KEY,
)
KMS_MASTER_KEY_PREVIOUS = env.str("LOOPWRIGHT_KMS_MASTER_KEY_PREVIOUS", default="") or None
KMS_AWS_ENDPOINT_URL = env.str("LOOPWRIGHT_KMS_AWS_ENDPOINT_URL", default="") or None
KMS_AWS_REGION = env.str("LOOPWRIGHT_KMS_AWS_REGION", default="us-east-1")
# The region AWS-style clients sign their requests for (SigV4 credential scope): boto3 and
# sagemaker-train sign with the region they are given (AWS_REGION), which must be this one.
AWS_REGION = env.str("LOOPWRIGHT_AWS_REGION", default="us-east-1")

# Usage pushed to Stripe Billing meters (docs/billing.md, "Stripe"); no key: nothing is pushed.
# How often Celery beat runs housekeeping and the Stripe push (controlplane/celery_app.py).
SWEEP_SECONDS = env.float("LOOPWRIGHT_SWEEP_SECONDS", default=15.0)
STRIPE_PUSH_EVERY_SECONDS = env.float("LOOPWRIGHT_STRIPE_PUSH_EVERY_SECONDS", default=60.0)
STRIPE_API_KEY = env.str("LOOPWRIGHT_STRIPE_API_KEY", default="")
STRIPE_API_BASE = env.str("LOOPWRIGHT_STRIPE_API_BASE", default="https://api.stripe.com")
STRIPE_METER_EVENT_NAMES = {
    "train_tokens": "loopwright_train_tokens",
    "forward_tokens": "loopwright_forward_tokens",
    "prefill_tokens": "loopwright_prefill_tokens",
    "sampled_tokens": "loopwright_sampled_tokens",
    "image_tokens": "loopwright_image_tokens",
    "storage_gb_months": "loopwright_storage_gb_months",
    **env.dict("LOOPWRIGHT_STRIPE_METER_EVENT_NAMES", default={}),
}
STRIPE_PUSH_WINDOW_MINUTES = env.int("LOOPWRIGHT_STRIPE_PUSH_WINDOW_MINUTES", default=60)
STRIPE_PUSH_GRACE_MINUTES = env.int("LOOPWRIGHT_STRIPE_PUSH_GRACE_MINUTES", default=15)
STRIPE_PUSH_BACKFILL_DAYS = env.int("LOOPWRIGHT_STRIPE_PUSH_BACKFILL_DAYS", default=30)
STRIPE_MAX_NETWORK_RETRIES = env.int("LOOPWRIGHT_STRIPE_MAX_NETWORK_RETRIES", default=2)
# Budgets' alert webhooks (docs/billing.md, "Budgets"): how long one delivery may take, how
# often one is tried, and whether a URL may reach this machine or a private network (tests,
# self-hosted receivers); by default such an address is refused.
BUDGET_WEBHOOK_TIMEOUT_SECONDS = env.float("LOOPWRIGHT_BUDGET_WEBHOOK_TIMEOUT_SECONDS", default=5.0)
BUDGET_WEBHOOK_MAX_ATTEMPTS = env.int("LOOPWRIGHT_BUDGET_WEBHOOK_MAX_ATTEMPTS", default=12)
BUDGET_WEBHOOK_ALLOW_PRIVATE = env.bool("LOOPWRIGHT_BUDGET_WEBHOOK_ALLOW_PRIVATE", default=False)

# Metrics at /metrics (controlplane/observability): a bearer token and/or a port of its own;
# with neither, /metrics answers nobody. The embedded default makes its token into DATA_DIR.
METRICS_PORT = env.int("LOOPWRIGHT_METRICS_PORT", default=0)
METRICS_TOKEN = env.str("LOOPWRIGHT_METRICS_TOKEN", default="") or (
    _secrets.secret(
        "LOOPWRIGHT_METRICS_TOKEN", install_secrets.METRICS_TOKEN_FILE, what="/metrics needs it"
    )
    if EMBEDDED
    else ""
)

# text: plain lines; json: one object per line with the request or operation id bound.
LOGGING = logging_config(
    fmt=env.str("LOOPWRIGHT_LOG_FORMAT", default="text"),
    level=env.str("LOOPWRIGHT_LOG_LEVEL", default="INFO"),
)
