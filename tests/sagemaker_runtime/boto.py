"""boto3's own runtime client (``sagemakertrainingsessionruntime``) for in-process tests:
botocore serializes, signs and parses as it does against AWS, and Django's test client serves
the request (``tests.aws.inprocess``). Every answer of a JSON operation is also held to the
service model's output shape strictly (``rendered_output``: no member the shape lacks, none
it requires left out), which botocore's own parser does not do."""

from __future__ import annotations

import json

import boto3
from botocore.config import Config

from controlplane.sagemaker_sessions.shapes import operation_model, rendered_output
from tests.aws.inprocess import _via_django

SERVICE = "sagemakertrainingsessionruntime"
ENDPOINT = "http://testserver/sagemaker-runtime"
PAYLOAD_ANSWERS = ("SampleTrainingSession", "SampleTrainingSessionWithResponseStream")


def _checked(request, event_name: str, **kw):
    response = _via_django(request, **kw)
    operation = event_name.rsplit(".", 1)[-1]
    if 200 <= response.status_code < 300 and operation not in PAYLOAD_ANSWERS:
        answer = json.loads(response.content)
        assert rendered_output(operation_model(SERVICE, operation), answer) == answer
    return response


def runtime_client(key_id: str, secret: str, *, region: str = "us-east-1", validate: bool = True):
    """boto3's runtime client signing with the access key ``key_id``/``secret`` (``validate``:
    whether botocore checks the input against the model before sending it)."""
    client = boto3.client(
        SERVICE,
        region_name=region,
        endpoint_url=ENDPOINT,
        aws_access_key_id=key_id,
        aws_secret_access_key=secret,
        config=Config(
            retries={"mode": "standard", "max_attempts": 1}, parameter_validation=validate
        ),
    )
    client.meta.events.register("before-send", _checked)
    return client


def send(request):
    """A request signed by hand (``tests.aws.signing``), served in process."""
    return _via_django(request.prepare())
