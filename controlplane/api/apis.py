"""Protocol endpoints that need no session: liveness."""

from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from loopwright.types import HealthResponse


@api_view(["GET"])
def healthz(request: Request) -> Response:
    return Response(HealthResponse(status="ok").model_dump())
