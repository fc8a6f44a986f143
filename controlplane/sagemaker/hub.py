"""ListHubContents and DescribeHubContent of the SageMaker Public Hub, answered from the base
models the workers serve (each with the training-session capability keyword and its model id);
any other hub is not found, and the Public Hub holds no content of another type."""

from __future__ import annotations

from controlplane.access_keys.aws_errors import AwsError
from controlplane.edge.callers import allow
from controlplane.sagemaker_sessions import hub
from controlplane.sagemaker_sessions.paging import offset_of, token_of
from controlplane.sagemaker_sessions.shapes import timestamp_of

from .calls import Call

DEFAULT_PAGE = 100


def _public_hub(name: str) -> None:
    if not hub.is_public_hub(name):
        raise AwsError("ResourceNotFound", f"Hub {name[:200]} does not exist.")


def _summary(model: hub.HubModel) -> dict:
    return {
        "HubContentName": model.content_name,
        "HubContentArn": hub.content_arn(model.content_name),
        "HubContentVersion": hub.CONTENT_VERSION,
        "HubContentType": "Model",
        "DocumentSchemaVersion": hub.SCHEMA_VERSION,
        "HubContentDisplayName": model.base_model[:255],
        "HubContentDescription": model.description[:1023],
        "SupportStatus": "Supported",
        "HubContentSearchKeywords": hub.keywords(model),
        "HubContentStatus": "Available",
        "CreationTime": model.updated_at,
    }


def list_hub_contents(call: Call, p: dict) -> dict:
    _public_hub(p["HubName"])
    allow(call.request, "sessions:ListBaseModels")
    models = hub.hub_models() if p["HubContentType"] == "Model" else []
    if p.get("NameContains"):
        wanted = p["NameContains"].lower()
        models = [m for m in models if wanted in m.content_name]
    if p.get("CreationTimeAfter") is not None:
        after = timestamp_of(p["CreationTimeAfter"], "CreationTimeAfter")
        models = [m for m in models if m.updated_at > after]
    if p.get("CreationTimeBefore") is not None:
        before = timestamp_of(p["CreationTimeBefore"], "CreationTimeBefore")
        models = [m for m in models if m.updated_at < before]
    by_time = p.get("SortBy") == "CreationTime"
    models.sort(
        key=(lambda m: (m.updated_at, m.content_name)) if by_time else (lambda m: m.content_name),
        reverse=p.get("SortOrder") == "Descending",
    )
    limit = p.get("MaxResults") or DEFAULT_PAGE
    offset = offset_of("hub", p.get("NextToken"))
    answer: dict = {"HubContentSummaries": [_summary(m) for m in models[offset : offset + limit]]}
    if len(models) > offset + limit:
        answer["NextToken"] = token_of("hub", {"o": offset + limit})
    return answer


def describe_hub_content(call: Call, p: dict) -> dict:
    _public_hub(p["HubName"])
    allow(call.request, "sessions:ListBaseModels")
    name = p["HubContentName"]
    found = next(
        (m for m in hub.hub_models() if m.content_name == name and p["HubContentType"] == "Model"),
        None,
    )
    version = p.get("HubContentVersion")
    if found is None or (version is not None and version != hub.CONTENT_VERSION):
        raise AwsError(
            "ResourceNotFound", f"HubContent {name[:63]} {version or ''} does not exist.".strip()
        )
    return {
        **{k: v for k, v in _summary(found).items() if k != "HubContentSearchKeywords"},
        "HubName": hub.HUB_NAME,
        "HubArn": hub.hub_arn(),
        "HubContentDocument": hub.document(found),
        "HubContentSearchKeywords": hub.keywords(found),
        "LastModifiedTime": found.updated_at,
    }
