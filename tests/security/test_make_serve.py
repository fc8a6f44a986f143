"""The attacks of the security review, tried again on the service as ``make serve`` starts it
(``manage.py serve``, no secret in its environment): forged, expired and orphaned download
links, tokens in the logs, an open ``/metrics``, framing and inline script; each must fail."""

from __future__ import annotations

import time

import httpx
import pytest
from django.core import signing

from controlplane.install_secrets import LEGACY_SECRET_KEY
from tests.e2e.stack import TINY, ServeStack

pytestmark = [pytest.mark.e2e]
SALT = "loopwright.external-weights"  # controlplane/api/external_weights.py


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    s = ServeStack(tmp_path_factory.mktemp("serve"))
    s.start()
    try:
        yield s
    finally:
        s.stop()


def api(stack: ServeStack, key: str) -> httpx.Client:
    return httpx.Client(base_url=f"{stack.url}/api/v1", headers={"X-API-Key": key}, timeout=60)


def done(client: httpx.Client, future: dict) -> dict:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        r = client.post("retrieve_future", json={"request_id": future["request_id"]})
        if r.status_code == 200:
            return r.json()
        assert r.status_code == 408, r.text
    raise AssertionError(f"{future} did not finish")


@pytest.fixture(scope="module")
def exported(stack) -> tuple[str, str]:
    """A checkpoint of alice's saved with its merged model: (its model id, its checkpoint id)."""
    alice = api(stack, stack.keys["alice"])
    session = alice.post(
        "create_session", json={"tags": [], "sdk_version": "t", "role_arn": stack.roles["alice"]}
    ).json()["session_id"]
    made = alice.post(
        "create_model",
        json={
            "session_id": session,
            "model_seq_id": 0,
            "base_model": TINY,
            "lora_config": {"rank": 4, "seed": 0},
        },
    ).json()
    model = done(alice, made)["model_id"]
    saved = alice.post("save_weights_external", json={"model_id": model, "seq_id": 1, "path": "x"})
    assert saved.status_code == 200, saved.text
    done(alice, saved.json())
    return model, "external_weights/x"


def links(client: httpx.Client, exported) -> dict[str, str]:
    model, checkpoint = exported
    r = client.get(f"training_runs/{model}/checkpoints/{checkpoint}/external_weights_urls")
    assert r.status_code == 200, r.text
    return r.json()["urls"]


def claim_of(url: str) -> dict:
    return signing.loads(httpx.URL(url).params["token"], salt=SALT, max_age=None, key=SECRET[0])


SECRET: list[str] = []  # the install's own secret, read from its data folder by the test below


def test_the_secrets_are_made_once_private_and_apart(stack) -> None:
    files = {n: stack.data_dir / n for n in ("secret-key", "kms-master-key", "metrics-token")}
    values = {n: p.read_text().strip() for n, p in files.items()}
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in files.values())
    assert len(set(values.values())) == 3 and all(len(v) >= 50 for v in values.values())
    assert LEGACY_SECRET_KEY not in values.values()
    assert values["kms-master-key"] != "loopwright-kms:" + values["secret-key"]
    assert "DJANGO_SECRET_KEY" not in stack.env and "LOOPWRIGHT_KMS_MASTER_KEY" not in stack.env
    SECRET.append(values["secret-key"])


def test_a_download_link_forged_with_the_old_default_secret_is_refused(stack, exported) -> None:
    url = links(api(stack, stack.keys["alice"]), exported)["adapter.tar.gz"]
    assert httpx.get(url, timeout=60).status_code == 200
    claim = claim_of(url)
    forged = signing.dumps(claim, key=LEGACY_SECRET_KEY, salt=SALT, compress=True)
    r = httpx.get(f"{stack.url}/api/v1/registry/signed-downloads", params={"token": forged})
    assert r.status_code == 404
    # the old form of link (a tenant id and a package number in the path) is gone
    old = signing.dumps({"t": claim["t"], "p": claim["p"], "f": "adapter"}, key=LEGACY_SECRET_KEY)
    assert httpx.get(f"{stack.url}/api/v1/registry/signed-downloads/{old}").status_code == 404


class _Then(signing.TimestampSigner):
    def timestamp(self) -> str:
        return signing.b62_encode(int(time.time()) - 2 * 3600)


def test_a_link_expires_after_an_hour(stack, exported) -> None:
    claim = claim_of(links(api(stack, stack.keys["alice"]), exported)["adapter.tar.gz"])
    signer = _Then(key=SECRET[0], salt=SALT)
    old = signer.sign_object(claim, serializer=signing.JSONSerializer, compress=True)
    r = httpx.get(f"{stack.url}/api/v1/registry/signed-downloads", params={"token": old})
    assert r.status_code == 410 and r.json()["code"] == "link_expired"


def test_a_link_names_its_key_is_audited_and_dies_with_the_key(stack, exported) -> None:
    alice = api(stack, stack.keys["alice"])
    made = alice.post("iam/api-keys", json={"name": "links"})
    assert made.status_code == 201, made.text
    prefix, raw = made.json()["prefix"], made.json()["api_key"]
    url = links(api(stack, raw), exported)["adapter.tar.gz"]
    assert claim_of(url)["k"] == prefix
    assert httpx.get(url, timeout=60, headers={"User-Agent": "fetcher/9"}).status_code == 200
    events = alice.get(
        "audit/events", params={"action": "sessions:GetCheckpointDownloadLinks"}
    ).json()["events"]
    assert any(e["api_key"] == prefix and e["user_agent"] == "fetcher/9" for e in events), events
    assert alice.post(f"iam/api-keys/{prefix}/revoke").status_code == 200
    r = httpx.get(url, timeout=60)
    assert r.status_code == 403 and r.json()["code"] == "link_revoked" and prefix in r.text


def test_charlie_cannot_make_links_to_alices_checkpoints(stack, exported) -> None:
    model, checkpoint = exported
    charlie = api(stack, stack.keys["charlie"])
    r = charlie.get(f"training_runs/{model}/checkpoints/{checkpoint}/external_weights_urls")
    assert r.status_code == 404


def test_metrics_need_the_token_the_install_made(stack) -> None:
    assert httpx.get(f"{stack.url}/metrics").status_code == 404
    wrong = httpx.get(f"{stack.url}/metrics", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 404
    token = (stack.data_dir / "metrics-token").read_text().strip()
    r = httpx.get(f"{stack.url}/metrics", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200 and "loopwright_" in r.text


def test_no_page_can_be_framed_or_run_inline_script(stack) -> None:
    r = httpx.get(f"{stack.url}/login")
    assert r.headers["X-Frame-Options"] == "DENY"
    csp = r.headers["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp
    assert "unsafe-inline" not in csp and "<script>" not in r.text
    # no TLS here: a client's X-Forwarded-Proto is not believed
    spoofed = httpx.get(f"{stack.url}/login", headers={"X-Forwarded-Proto": "https"})
    assert "Strict-Transport-Security" not in spoofed.headers
    assert "secure" not in spoofed.headers.get("set-cookie", "").lower()


def test_no_token_reaches_the_logs(stack, exported) -> None:
    alice = api(stack, stack.keys["alice"])
    secrets = []
    # a download link, used, and as the Referer of another request
    url = links(alice, exported)["adapter.tar.gz"]
    token = httpx.URL(url).params["token"]
    assert httpx.get(url, timeout=60).status_code == 200
    httpx.get(f"{stack.url}/nope", headers={"Referer": url})
    secrets.append(token)
    # an invitation: its link keeps the token in the fragment; an old-style link in the query
    invited = alice.post("iam/users", json={"email": "dana@example.com", "role": "member"})
    assert invited.status_code == 201, invited.text
    invitation = invited.json()["token"]
    secrets.append(invitation)
    page = httpx.get(f"{stack.url}/invitations/accept", params={"token": invitation})
    assert page.status_code == 200 and page.headers["Referrer-Policy"] == "no-referrer"
    httpx.get(
        f"{stack.url}/static/web/app.css",
        headers={"Referer": f"{stack.url}/invitations/accept?token={invitation}"},
    )
    # SigV4 presigned query credentials, and any token- or key-like parameter
    sigv4 = {
        "X-Amz-Algorithm": "AWS4-HMAC-SHA256",
        "X-Amz-Credential": "AKIASECRETCREDENTIAL/20250101/us-east-1/sagemaker/aws4_request",
        "X-Amz-Security-Token": "SECRETSESSIONTOKEN",
        "X-Amz-Signature": "5ecre7516na7ure",
    }
    httpx.get(f"{stack.url}/api/v1/healthz", params=sigv4)
    secrets += ["AKIASECRETCREDENTIAL", "SECRETSESSIONTOKEN", "5ecre7516na7ure"]
    key_part = stack.keys["alice"].split(".", 1)[1]
    httpx.get(f"{stack.url}/api/v1/healthz", params={"api_key": stack.keys["alice"], "access_token": "SECRETACCESS"})  # fmt: skip
    secrets += [key_part, "SECRETACCESS"]
    time.sleep(1)  # the access log line is written as each answer ends
    # the banner `make serve` prints on its terminal shows the local key, by design; no log does
    banner = f"export LOOPWRIGHT_API_KEY={stack.keys['alice']}"
    log = "\n".join(line for line in stack.logs().splitlines() if line.strip() != banner)
    assert "/api/v1/healthz" in log and "signed-downloads" in log  # the requests were logged
    leaked = [s for s in secrets if s in log]
    assert not leaked, [line for line in log.splitlines() if any(s in line for s in leaked)]
    assert "[redacted]" in log


def test_every_process_of_the_install_reuses_its_secrets(stack) -> None:
    """A management command beside the running service reads the same secrets: a key it makes
    authenticates against the running control plane."""
    before = (stack.data_dir / "secret-key").read_text()
    raw = stack.manage("create_api_key", "--account", stack.accounts["charlie"], "--role", "LoopwrightSessionRole").strip()  # fmt: skip
    assert api(stack, raw).get("auth/whoami").status_code == 200
    assert (stack.data_dir / "secret-key").read_text() == before
