"""URL map: the Tinker wire protocol under /api/v1/, OpenAI-compatible endpoints and Anthropic's
Messages under /v1/, SageMaker's control plane at /sagemaker and its runtime under
/sagemaker-runtime/, the dashboard at the root."""

from django.urls import include, path

from controlplane import openapi
from controlplane.edge.errors import api_not_found, api_server_error
from controlplane.observability.views import metrics
from controlplane.sagemaker.endpoint import endpoint as sagemaker

urlpatterns = [
    path("metrics", metrics, name="metrics"),
    path("api/v1/", include("controlplane.api.urls")),
    path("v1/", include("controlplane.openai_api.urls")),
    path("v1/", include("controlplane.anthropic_api.urls")),  # messages, messages/count_tokens
    # SageMaker's control plane (AWS JSON 1.1, SigV4): botocore posts to the endpoint URL as is
    path("sagemaker", sagemaker),
    # SageMaker's training-session runtime (REST-JSON, SigV4): the paths of its service model
    path("sagemaker-runtime/", include("controlplane.sagemaker_runtime.urls")),
    path("", include("web.urls")),
]
openapi.document_all()  # every route of /api/v1 and /v1 described in the OpenAPI document

# Under /api/v1/ and /v1/ a path that matches no route (and a crash outside any view) is answered
# in the API's own error shape; elsewhere, the dashboard's pages.
handler404 = api_not_found
handler500 = api_server_error
