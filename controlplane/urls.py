"""URL map: the Tinker wire protocol under /api/v1/, OpenAI-compatible endpoints under /v1/, the
dashboard at the root."""

from django.urls import include, path

from controlplane.observability.views import metrics

urlpatterns = [
    path("metrics", metrics, name="metrics"),
    path("api/v1/", include("controlplane.api.urls")),
    path("v1/", include("controlplane.openai_api.urls")),
    path("", include("web.urls")),
]
