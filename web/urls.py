"""The dashboard: one URL module per section under ``web.pages``, each naming its full paths."""

from django.urls import include, path

SECTIONS = (
    "accounts",
    "overview",
    "sessions",
    "registry",
    "iam",
    "kms",
    "vpc",
    "billing",
    "budgets",
    "audit",
)

urlpatterns = [path("", include(f"web.pages.{section}")) for section in SECTIONS]
