"""The dashboard: one URL module per section under ``web.pages``, each naming its full paths."""

from django.templatetags.static import static
from django.urls import include, path
from django.views.generic.base import RedirectView

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

urlpatterns = [path("", include(f"web.pages.{section}")) for section in SECTIONS] + [
    # browsers ask for /favicon.ico whatever the page links: the icon with the static files
    path("favicon.ico", RedirectView.as_view(url=static("web/favicon.svg"), permanent=True)),
]
