"""URL map: the Tinker wire protocol lives under /api/v1/."""

from django.urls import include, path

urlpatterns = [
    path("api/v1/", include("controlplane.api.urls")),
]
