from django.urls import path

from . import apis

urlpatterns = [
    path("healthz", apis.healthz, name="healthz"),
]
