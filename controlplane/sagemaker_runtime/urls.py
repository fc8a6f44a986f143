"""The runtime's routes under /sagemaker-runtime/: the service model's paths (the passthrough's
have no ``/v1``); any other path is an ``UnknownOperationException`` in the service's shape."""

from django.urls import path, re_path
from django.views.decorators.csrf import csrf_exempt

from . import views

SESSION = "training-sessions/<str:name>"

urlpatterns = [
    path(f"v1/{SESSION}/operations", views.TrainingOperations.as_view()),
    path(f"v1/{SESSION}/operations/<str:operation_id>", views.TrainingOperation.as_view()),
    path(f"v1/{SESSION}/sampling-operations", views.SamplingOperations.as_view()),
    path(
        f"v1/{SESSION}/sampling-operations/<str:operation_id>",
        views.SamplingOperation.as_view(),
    ),
    path(f"{SESSION}/sample", views.Sample.as_view()),
    path(f"{SESSION}/sample-with-response-stream", views.SampleStream.as_view()),
    re_path(r"^.*$", csrf_exempt(views.unknown)),
]
