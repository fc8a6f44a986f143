"""The OpenAPI document is complete: every route and method of /api/v1 and /v1, every field of
every body with its bounds, one error shape per face; it and its docs page are served by the
control plane itself; charlie (another tenant) still gets 404s on the routes it describes."""

from __future__ import annotations

import re

import pytest
from pydantic import BaseModel

from controlplane import openapi
from controlplane.anthropic_api.urls import urlpatterns as anthropic_routes
from controlplane.api.urls import urlpatterns as api_routes
from controlplane.openai_api.urls import urlpatterns as openai_routes
from tests.support.wire import open_session

pytestmark = pytest.mark.django_db

NOT_DOCUMENTED = {"schema", "docs"}  # the document and its page themselves


@pytest.fixture(scope="module")
def document(django_db_blocker) -> dict:
    from rest_framework.test import APIClient

    with django_db_blocker.unblock():
        r = APIClient().get("/api/v1/schema")  # no key needed
    assert r.status_code == 200 and r["Content-Type"].startswith("application/")
    return r.json()


def _openapi_path(prefix: str, pattern: str) -> str:
    return prefix + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", pattern)


def _methods(view) -> set[str]:
    cls = view.cls  # the view class (@api_view makes one with a handler per method)
    return {m.upper() for m in ("get", "post", "put", "patch", "delete") if hasattr(cls, m)}


FACES = (  # prefix, routes, the error shape of its refusals
    ("/api/v1/", api_routes, "Error"),
    ("/v1/", openai_routes, "OpenAIError"),
    ("/v1/", anthropic_routes, "AnthropicError"),
)


def _routes():
    for prefix, routes, error in FACES:
        for route in routes:
            if str(route.pattern) not in NOT_DOCUMENTED:
                yield prefix, route, error


def test_every_route_and_method_is_in_the_document(document) -> None:
    assert document["openapi"] == "3.1.0"
    described = {**openapi.ROUTES, **openapi.OPENAI_ROUTES, **openapi.ANTHROPIC_ROUTES}
    for prefix, route, error in _routes():
        path = _openapi_path(prefix, str(route.pattern))
        assert path in document["paths"], path
        view = route.callback
        key = getattr(view, "view_class", view)
        assert key in described or view in described, f"describe {path} in openapi.ROUTES"
        ops = document["paths"][path]
        assert {m.upper() for m in ops if m != "parameters"} == _methods(view), path
        for op in ops.values():
            ref = op["responses"]["4XX"]["content"]["application/json"]["schema"]["$ref"]
            assert ref == f"#/components/schemas/{error}", (path, ref)


def _component(document: dict, ref: str) -> dict:
    return document["components"]["schemas"][ref.rsplit("/", 1)[1]]


def test_every_field_of_every_body_is_in_the_document(document) -> None:
    checked = 0
    for path, ops in document["paths"].items():
        for method, op in ops.items():
            model = _request_model(path, method)
            if model is None:
                continue
            ref = op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
            assert ref.endswith("Input"), ref  # the request's own (validation) schema
            props = _component(document, ref).get("properties", {})
            assert set(props) == set(model.model_fields), (path, method)
            checked += 1
    assert checked >= 40


def _request_model(path: str, method: str) -> type[BaseModel] | None:
    for prefix, route, _ in _routes():
        if _openapi_path(prefix, str(route.pattern)) == path:
            view = route.callback
            view_class = getattr(view, "view_class", None)
            ops = (
                openapi.ROUTES.get(view)
                or openapi.OPENAI_ROUTES.get(view_class)
                or openapi.ANTHROPIC_ROUTES.get(view_class)
            )
            request = ops[method.upper()].request
            if isinstance(request, dict):  # by media type
                request = request["application/json"]
            return request if isinstance(request, type) and issubclass(request, BaseModel) else None
    raise AssertionError(path)


def test_the_bounds_are_stated(document) -> None:
    schemas = document["components"]["schemas"]
    seq = schemas["ForwardBackwardRequestInput"]["properties"]["seq_id"]["anyOf"][0]
    assert (seq["minimum"], seq["maximum"]) == (1, 2**31 - 1)
    tokens = schemas["EncodedTextChunkInput"]["properties"]["tokens"]["items"]
    assert (tokens["minimum"], tokens["maximum"]) == (0, 2**31 - 1)
    data = schemas["ForwardBackwardInputInput"]["properties"]["data"]
    assert (data["minItems"], data["maxItems"]) == (1, 1024)
    lr = schemas["AdamParamsInput"]["properties"]["learning_rate"]
    assert (lr["minimum"], lr["maximum"]) == (0, 10)
    model_id = schemas["GetInfoRequestInput"]["properties"]["model_id"]
    assert (model_id["minLength"], model_id["maxLength"]) == (1, 128)
    tags = schemas["CreateSessionRequestInput"]["properties"]["tags"]
    assert tags["maxItems"] == 64 and tags["items"]["maxLength"] == 256
    error = schemas["Error"]
    assert set(error["properties"]) == {"detail", "code", "field"}
    assert error["properties"]["detail"]["maxLength"] == 1000
    messages = schemas["MessagesRequestInput"]["properties"]
    assert (messages["max_tokens"]["minimum"], messages["max_tokens"]["maximum"]) == (1, 2**31 - 1)
    assert messages["temperature"]["anyOf"][0]["maximum"] == 1
    assert "max_tokens" in schemas["MessagesRequestInput"]["required"]
    anthropic = schemas["AnthropicError"]["properties"]
    assert set(anthropic) == {"type", "error"}


def test_the_docs_page_and_its_assets_are_served_here(client) -> None:
    page = client.get("/api/v1/docs")
    assert page.status_code == 200
    html = page.content.decode()
    assert "https://" not in html and "<script>" not in html  # no CDN, no inline script
    assert "script-src 'self'" in page["Content-Security-Policy"]
    asset = re.search(r'src="(/static/drf_spectacular_sidecar/[^"]+\.js)"', html).group(1)
    served = client.get(asset)
    assert served.status_code == 200
    served.close()
    start = re.search(r'src="(/api/v1/docs\?[^"]*script[^"]*)"', html).group(1)
    script = client.get(start.replace("&amp;", "&"))
    assert script.status_code == 200 and "/api/v1/schema" in script.content.decode()


def test_charlie_gets_404_on_what_the_document_describes(alice, charlie) -> None:
    sid = open_session(alice)
    assert charlie.get(f"sessions/{sid}").status_code == 404
    assert charlie.post("session_heartbeat", {"session_id": sid}).status_code == 404
    hi = [{"role": "user", "content": "hi"}]
    r = charlie.client.post(
        "/v1/messages/count_tokens", {"model": sid, "messages": hi}, format="json"
    )
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"


def test_the_messages_routes_answer_529_when_overloaded(document) -> None:
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        answers = document["paths"][path]["post"]["responses"]
        assert "529" in answers and "503" not in answers, path
