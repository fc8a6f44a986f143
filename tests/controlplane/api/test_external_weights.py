"""save_weights_external and external_weights_urls (tinker SDK >= 0.30): time-limited links to
the registry's archives of a checkpoint, usable without a key, naming who made them, refused
once that principal's access is revoked, every use audited; charlie gets 404."""

from __future__ import annotations

import io
import tarfile
from urllib.parse import parse_qs, urlsplit

import pytest
from django.core import signing
from rest_framework.test import APIClient

from controlplane.audit.models import AuditEvent
from controlplane.iam.models import ApiKey, Role
from controlplane.iam.services import api_key_create, api_key_revoke, role_delete
from controlplane.tenants.models import Membership
from controlplane.tenants.services import membership_remove
from tests.support.callers import api_client, member
from tests.support.wire import create_model, datum, fwdbwd, open_session, result

pytestmark = pytest.mark.django_db


@pytest.fixture
def saved(alice, runtime, settings, tmp_path) -> tuple[str, str]:
    settings.DOWNLOAD_SCRATCH_DIR = str(tmp_path / "downloads")
    model = create_model(alice, runtime, open_session(alice))
    result(
        alice, runtime, alice.post("forward_backward", fwdbwd(model, 1, [datum([1, 2, 3])])).json()
    )
    r = alice.post("save_weights_external", {"model_id": model, "seq_id": 2, "path": "for-export"})
    assert r.status_code == 200, r.content
    answer = result(alice, runtime, r.json())
    assert answer["path"] == f"tinker://{model}/external_weights/for-export"
    return model, answer["path"]


def names(content: bytes) -> set[str]:
    with tarfile.open(fileobj=io.BytesIO(content), mode="r:gz") as tar:
        return {m.name.rsplit("/", 1)[-1] for m in tar.getmembers()}


def test_links_download_the_adapter_and_the_merged_model_without_a_key(alice, saved):
    model, _ = saved
    r = alice.get(
        f"training_runs/{model}/checkpoints/external_weights/for-export/external_weights_urls"
    )
    assert r.status_code == 200, r.content
    urls = r.json()["urls"]
    assert set(urls) == {"adapter.tar.gz", "merged.tar.gz"} and r.json()["expires"]
    anonymous = APIClient()
    adapter = anonymous.get(urls["adapter.tar.gz"].split("testserver", 1)[-1])
    assert adapter.status_code == 200
    assert "adapter_config.json" in names(b"".join(adapter.streaming_content))
    merged = anonymous.get(urls["merged.tar.gz"].split("testserver", 1)[-1])
    assert "config.json" in names(b"".join(merged.streaming_content))
    # the sampler path of the same checkpoint works too
    r = alice.get(
        f"training_runs/{model}/checkpoints/sampler_weights/for-export/external_weights_urls"
    )
    assert r.status_code == 200


def test_links_are_the_tenants_and_expire(alice, charlie, saved, settings):
    model, _ = saved
    path = f"training_runs/{model}/checkpoints/external_weights/for-export/external_weights_urls"
    assert charlie.get(path).status_code == 404
    assert (
        alice.get(f"training_runs/{model}/checkpoints/nope/x/external_weights_urls").status_code
        == 404
    )
    url = alice.get(path).json()["urls"]["adapter.tar.gz"].split("testserver", 1)[-1]
    anonymous = APIClient()
    assert anonymous.get(url[:-3] + "abc").status_code == 404  # not a link of ours
    assert "?token=" in url and "/signed-downloads?" in url  # never in the path
    settings.DOWNLOAD_LINK_SECONDS = -1
    r = anonymous.get(url)
    assert r.status_code == 410 and r.json()["code"] == "link_expired"


LINKS = "training_runs/{}/checkpoints/external_weights/for-export/external_weights_urls"


def link_of(person, model: str) -> str:
    r = person.get(LINKS.format(model))
    assert r.status_code == 200, r.content
    return r.json()["urls"]["adapter.tar.gz"].split("testserver", 1)[-1]


def test_a_link_names_its_maker_and_every_use_is_audited(alice, saved):
    model, _ = saved
    url = link_of(alice, model)
    prefix = alice.key.split(".")[0]
    token = parse_qs(urlsplit(url).query)["token"][0]
    claim = signing.loads(token, salt="loopwright.external-weights")
    assert claim["k"] == prefix and claim["a"].endswith(":user/alice@example.com")
    before = AuditEvent.objects.filter(action="kms:Decrypt", api_key=prefix).count()
    for _ in range(2):
        r = APIClient().get(url, HTTP_USER_AGENT="downloader/1", REMOTE_ADDR="203.0.113.9")
        assert r.status_code == 200
        b"".join(r.streaming_content)
    used = AuditEvent.objects.filter(
        action="sessions:GetCheckpointDownloadLinks", user_agent="downloader/1"
    )
    assert used.count() == 2
    assert {(e.principal, e.api_key, e.source_ip, e.allowed) for e in used} == {
        (claim["a"], prefix, "203.0.113.9", True)
    }
    assert AuditEvent.objects.filter(action="kms:Decrypt", api_key=prefix).count() == before + 2


def test_a_revoked_key_refuses_its_links(alice, saved):
    model, _ = saved
    key, raw = api_key_create(tenant=alice.tenant, user=ApiKey.objects.get(prefix=alice.key.split(".")[0]).user, name="links")  # fmt: skip
    url = link_of(_person(alice, raw), model)
    assert APIClient().get(url).status_code == 200
    api_key_revoke(key=key)
    r = APIClient().get(url)
    assert r.status_code == 403 and r.json()["code"] == "link_revoked", r.content
    assert key.prefix in r.json()["detail"]


def test_a_member_who_left_refuses_their_links(alice, saved):
    model, _ = saved
    dana = member("dana", alice)
    url = link_of(dana, model)
    assert APIClient().get(url).status_code == 200
    owner = Membership.objects.get(tenant=alice.tenant, role=Membership.Role.OWNER)
    membership_remove(
        membership=Membership.objects.get(user__email="dana@example.com"), acting_membership=owner
    )
    assert APIClient().get(url).status_code == 403


def test_a_deleted_role_refuses_its_links_and_a_policy_change_is_heard(alice, saved):
    model, _ = saved
    role = Role.objects.get(tenant=alice.tenant, name=alice.role_arn.rsplit("/", 1)[1])
    _, raw = api_key_create(tenant=alice.tenant, role=role, name="role-links")
    url = link_of(_person(alice, raw), model)
    assert APIClient().get(url).status_code == 200
    kept = list(role.policies.values_list("name", flat=True))
    role.policies.all().delete()  # the role may no longer make (nor use) such links
    r = APIClient().get(url)
    assert r.status_code == 403 and r.json()["code"] == "access_denied", (r.content, kept)
    role_delete(role=role)
    r = APIClient().get(url)
    assert r.status_code == 403 and r.json()["code"] == "link_revoked"


def _person(of, raw: str):
    """``of``'s tenant, calling with another key."""
    return type(of)(of.name, api_client(raw), of.tenant, of.role_arn, raw)


def test_age_encryption_is_refused_by_name(alice, runtime):
    model = create_model(alice, runtime, open_session(alice))
    r = alice.post(
        "save_weights_external",
        {"model_id": model, "seq_id": 1, "path": "x", "age_encryption_recipients": ["age1abc"]},
    )
    assert r.status_code == 400 and r.json()["field"] == "age_encryption_recipients"
