"""CreateTrainingSession, DescribeTrainingSession, ListTrainingSessions, StopTrainingSession and
DeleteTrainingSession: a training session is a Loopwright session training one LoRA model,
named, reported and authorized as the Tinker API's (``sessions:*`` actions on its ARN)."""

from __future__ import annotations

from datetime import datetime

from controlplane.edge.callers import allow
from controlplane.errors import NotFound
from controlplane.iam.resources import model_arn, session_arn
from controlplane.iam.sessions import session_role
from controlplane.kms.selectors import key_resolve
from controlplane.operations.training import create_model_conditions
from controlplane.sagemaker_sessions import hub, selectors, services
from controlplane.sagemaker_sessions.paging import cursor_of, token_of
from controlplane.sagemaker_sessions.shapes import ShapeError
from controlplane.storage import S3UriError, parse_s3_uri
from controlplane.tenants.services import storage_location_owned
from controlplane.training_sessions.models import Session
from controlplane.training_sessions.services.lora import MAX_LORA_RANK
from controlplane.training_sessions.services.sessions import session_touch

from .calls import Call, created_between, validation

DEFAULT_PAGE = 10  # what SageMaker's list operations return without MaxResults
_LIVE = (Session.State.PENDING, Session.State.ACTIVE)
# the session states in which a session can show each status (Deleting and the like: none)
STATES_OF = {
    "Created": _LIVE,
    "Scheduled": _LIVE,
    "Running": _LIVE,
    "Blocked": _LIVE,
    "Failed": (*_LIVE, Session.State.FAILED),
    "Stopping": (Session.State.STOPPING,),
    "Stopped": (Session.State.STOPPED,),
    "Expired": (Session.State.EXPIRED,),
}
SCAN_CHUNK = 200


def create_training_session(call: Call, p: dict) -> dict:
    tenant, request = call.tenant, call.request
    name = p["TrainingSessionName"]
    if not selectors.SESSION_NAME.fullmatch(name):
        raise validation(
            "TrainingSessionName: 1 to 63 letters, digits and hyphens, starting and ending "
            "with a letter or digit"
        )
    allow(request, "sessions:CreateTrainingSession", session_arn(tenant, "*"))
    role = session_role(call.principal, p["RoleArn"], request=request)
    base_arn = p["ModelConfig"]["BaseModelArn"]
    base_model = hub.base_model_of(base_arn)
    if base_model is None:
        served = ", ".join(hub.content_arn(m.content_name) for m in hub.hub_models())
        raise validation(
            f"ModelConfig.BaseModelArn: {base_arn[:300]!r} is no base model served here "
            f"(ListHubContents lists them): {served or 'none right now'}"
        )
    lora = _lora(p["LoraConfig"])
    allow(
        request,
        "sessions:CreateModel",
        model_arn(tenant, "*"),
        **create_model_conditions(base_model=base_model, lora=lora),
    )
    location = p["OutputConfig"]["S3Location"]
    platform = {"role_arn": role.arn, **_output(call, location)}
    if p.get("ModelPackageGroupArn"):
        platform["model_package_group_arn"] = p["ModelPackageGroupArn"]
    if p.get("VpcConfig"):
        vpc = p["VpcConfig"]
        platform["vpc_config"] = {
            "subnets": vpc["Subnets"],
            "security_group_ids": vpc["SecurityGroupIds"],
        }
    session = services.training_session_create(
        tenant=tenant,
        actor=call.principal.arn,
        name=name,
        base_model=base_model,
        lora=lora,
        platform=platform,
        tags=_tags(p.get("Tags") or []),
        base_model_arn=base_arn,
        output_path=location["Path"],
    )
    return {"TrainingSessionArn": selectors.arn_of(session)}


def _lora(config: dict) -> dict:
    rank, alpha = config["Rank"], config["Alpha"]
    if rank > MAX_LORA_RANK:
        raise validation(
            f"LoraConfig.Rank: at most {MAX_LORA_RANK} on this service (its workers' limit), "
            f"got {rank}"
        )
    return {"rank": rank, "alpha": alpha}


def _output(call: Call, location: dict) -> dict:
    """Where checkpoints go: under the S3 path when it lies in a storage location registered
    for the account (real S3), else the service's own storage (the path is kept and shown)."""
    platform: dict = {}
    path = location["Path"]
    if path.startswith("s3://"):
        try:
            bucket, prefix = parse_s3_uri(path)
        except S3UriError as exc:
            raise validation(f"OutputConfig.S3Location.Path: {exc}") from None
        uri = f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"
        if storage_location_owned(tenant=call.tenant, uri=uri):
            platform["s3_output_path"] = uri
    elif not path.startswith("https://"):
        raise validation("OutputConfig.S3Location.Path: an s3:// (or https://) URI")
    if location.get("KmsKeyArn"):
        field = "OutputConfig.S3Location.KmsKeyArn"
        key = key_resolve(tenant=call.tenant, ref=location["KmsKeyArn"], field=field)
        allow(call.request, "kms:DescribeKey", key.arn)
        platform["kms_key_arn"] = key.arn
    return platform


def _tags(tags: list[dict]) -> dict[str, str]:
    found: dict[str, str] = {}
    for i, tag in enumerate(tags):
        if tag["Key"] in found:
            raise validation(f"Tags[{i}].Key: {tag['Key'][:128]!r} appears twice")
        found[tag["Key"]] = tag["Value"]
    return found


def describe_training_session(call: Call, p: dict) -> dict:
    session = _session(call, p, "sessions:DescribeTrainingSession")
    session_touch(session)  # the SDK polls this while it waits: a sign of life
    return {"TrainingSessionDetail": detail(session)}


def _session(call: Call, p: dict, action: str) -> Session:
    """The session the request names, once ``action`` is allowed on it (authorized on the ARN
    of what was named, so a missing session and another tenant's are refused alike)."""
    name = p["TrainingSessionName"]
    try:
        found = selectors.session_named(tenant=call.tenant, name=name)
    except NotFound:
        # refused as one that exists would be, when the caller may not: existence is not told
        allow(call.request, action, session_arn(call.tenant, name))
        raise
    allow(call.request, action, selectors.arn_of(found))
    return found


def detail(session: Session) -> dict:
    model = selectors.session_model(session)
    record = selectors.record_of(session)
    status = selectors.status_of(session, model)
    platform = session.platform or {}
    location: dict = {"Path": (record.output_path if record else "") or _storage_path(platform)}
    if platform.get("kms_key_arn"):
        location["KmsKeyArn"] = platform["kms_key_arn"]
    vpc = platform.get("vpc_config")
    return {
        "TrainingSessionArn": selectors.arn_of(session),
        "TrainingSessionName": selectors.display_name(session),
        "TrainingSessionStatus": status.name,
        "ModelPackageGroupArn": platform.get("model_package_group_arn"),
        "CreationTime": session.created_at,
        "LastModifiedTime": _last_modified(session),
        "EndTime": session.ended_at,
        "ErrorDetails": status.details,
        "LastReceivedSequenceNumber": selectors.last_sequence_number(session),
        "BillableTokenUsage": selectors.billable_usage(session),
        "VpcConfig": (
            {"SecurityGroupIds": vpc["security_group_ids"], "Subnets": vpc["subnets"]}
            if vpc
            else None
        ),
        "RoleArn": platform.get("role_arn"),
        "LoraConfig": (
            {"Rank": model.lora.get("rank", 32), "Alpha": _alpha(model.lora)} if model else None
        ),
        "ModelConfig": (
            {"BaseModelArn": (record.base_model_arn if record else "") or _hub_arn(model)}
            if model
            else None
        ),
        "OutputConfig": {"S3Location": location},
        "Tags": [{"Key": k, "Value": str(v)} for k, v in (session.user_metadata or {}).items()]
        or None,
    }


def _storage_path(platform: dict) -> str:
    return platform.get("s3_output_path") or "s3://loopwright-managed-storage"


def _alpha(lora: dict) -> int:
    alpha = lora.get("alpha") or 32
    return max(1, round(alpha))


def _hub_arn(model) -> str:
    return hub.content_arn(hub.content_name_of(model.base_model))


def _last_modified(session: Session) -> datetime:
    times = [t for t in (session.created_at, session.last_heartbeat_at, session.ended_at) if t]
    return max(times)


def list_training_sessions(call: Call, p: dict) -> dict:
    allow(call.request, "sessions:ListTrainingSessions")
    limit = p.get("MaxResults") or DEFAULT_PAGE
    found = selectors.visible(tenant=call.tenant).order_by("-created_at", "-id")
    found = created_between(found, p)
    cursor = cursor_of("sessions", p.get("NextToken"))
    if cursor is not None:
        found = _after(found, cursor)
    wanted_status, contains = p.get("StatusEquals"), (p.get("NameContains") or "").lower()
    if wanted_status:  # only sessions in a state that can have that status are looked at
        found = found.filter(state__in=STATES_OF.get(wanted_status, ()))
    page: list[tuple[Session, str]] = []
    for session in found.iterator(chunk_size=SCAN_CHUNK):
        if contains and contains not in selectors.display_name(session).lower():
            continue
        status = selectors.status_of(session).name
        if wanted_status and status != wanted_status:
            continue
        page.append((session, status))
        if len(page) > limit:
            break
    more = len(page) > limit
    page = page[:limit]
    answer: dict = {
        "TrainingSessionSummaries": [
            {
                "TrainingSessionArn": selectors.arn_of(s),
                "TrainingSessionStatus": status,
                "CreationTime": s.created_at,
                "LastModifiedTime": _last_modified(s),
            }
            for s, status in page
        ]
    }
    if more:
        last = page[-1][0]
        answer["NextToken"] = token_of(
            "sessions", {"t": last.created_at.isoformat(), "id": last.id}
        )
    return answer


def _after(found, cursor: dict):
    when, last_id = cursor.get("t"), cursor.get("id")
    if not isinstance(when, str) or not isinstance(last_id, str):
        raise ShapeError("NextToken", "is invalid (not a token this list gave)")
    try:
        stamp = datetime.fromisoformat(when)
    except ValueError:
        raise ShapeError("NextToken", "is invalid (not a token this list gave)") from None
    return found.filter(created_at__lte=stamp).exclude(created_at=stamp, id__gte=last_id)


def stop_training_session(call: Call, p: dict) -> dict:
    session = _session(call, p, "sessions:StopTrainingSession")
    services.training_session_stop(tenant=call.tenant, session=session)
    return {}


def delete_training_session(call: Call, p: dict) -> dict:
    session = _session(call, p, "sessions:DeleteTrainingSession")
    services.training_session_delete(tenant=call.tenant, session=session, actor=call.principal.arn)
    return {}
