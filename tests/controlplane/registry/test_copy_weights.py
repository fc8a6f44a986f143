"""copy_weights: a checkpoint copied into a session's slot or the account's project resumes
exactly like its source, outlives it, is a registry version with the source as its parent, is
made once per idempotency key; bad requests are 4xx naming the field; other tenants get 404."""

from __future__ import annotations

from datetime import timedelta

import pytest
import torch
from django.utils import timezone

from controlplane.registry.models import ModelPackage
from controlplane.training_sessions.models import Checkpoint, TrainingModel
from controlplane.training_sessions.services.retention import checkpoints_expire
from tests.support.wire import create_model, datum, fwdbwd, open_session, result

pytestmark = pytest.mark.django_db
ADAM = {"learning_rate": 0.05}


def trained(alice, runtime) -> tuple[str, str]:
    """A model trained two steps, its state saved as ``s`` (and sampler weights ``w``)."""
    model_id = create_model(alice, runtime, open_session(alice))
    seq = 1
    for tokens in ([1, 2, 3, 4], [5, 6, 7]):
        result(
            alice,
            runtime,
            alice.post("forward_backward", fwdbwd(model_id, seq, [datum(tokens)])).json(),
        )
        body = {"model_id": model_id, "seq_id": seq + 1, "adam_params": ADAM}
        result(alice, runtime, alice.post("optim_step", body).json())
        seq += 2
    saved = alice.post("save_weights", {"model_id": model_id, "seq_id": seq, "path": "s"})
    path = result(alice, runtime, saved.json())["path"]
    sampler = alice.post(
        "save_weights_for_sampler", {"model_id": model_id, "seq_id": seq + 1, "path": "w"}
    )
    result(alice, runtime, sampler.json())
    return model_id, path


def copy(person, body: dict, key: str | None = None):
    headers = {"HTTP_X_IDEMPOTENCY_KEY": key} if key else {}
    return person.post("copy_weights", body, **headers)


def resumed(alice, runtime, path: str) -> dict[str, torch.Tensor]:
    """A new model loads ``path`` with its optimizer and takes one more step: its adapter."""
    model_id = create_model(alice, runtime, open_session(alice))
    load = {"model_id": model_id, "seq_id": 1, "path": path, "optimizer": True}
    assert "path" in result(alice, runtime, alice.post("load_weights", load).json())
    result(
        alice, runtime, alice.post("forward_backward", fwdbwd(model_id, 2, [datum([8, 9])])).json()
    )
    step = {"model_id": model_id, "seq_id": 3, "adam_params": ADAM}
    result(alice, runtime, alice.post("optim_step", step).json())
    return {k: v.clone() for k, v in runtime.host.pool.state_dict(model_id).items()}


def test_a_copy_resumes_like_its_source_and_outlives_it(alice, runtime) -> None:
    source_model, source = trained(alice, runtime)
    destination = open_session(alice)
    r = copy(alice, {"source_path": source, "session_id": destination, "model_seq_id": 0}, "k1")
    assert r.status_code == 200, r.content
    path = r.json()["tinker_path"]
    copied = Checkpoint.objects.get(tinker_path=path)
    assert path == f"tinker://{copied.model_id}/weights/s" and copied.model_id != source_model
    run = TrainingModel.objects.get(pk=copied.model_id)
    assert (run.session_id, run.model_seq_id, run.state) == (destination, 0, "unloaded")
    assert (
        copied.kms_key_arn
        and copied.storage_uri != Checkpoint.objects.get(tinker_path=source).storage_uri
    )  # its own files, sealed for its own path
    package = ModelPackage.objects.get(checkpoint=copied)
    assert package.parent == ModelPackage.objects.get(tinker_path=source)

    again = copy(alice, {"source_path": source, "session_id": destination, "model_seq_id": 0}, "k1")
    assert again.json() == r.json()  # a retry: the same copy, no second version
    assert ModelPackage.objects.filter(tinker_path=path).count() == 1

    from_source = resumed(alice, runtime, source)
    Checkpoint.objects.filter(tinker_path=source).update(expires_at=timezone.now() - timedelta(1))
    assert checkpoints_expire() == [source]  # the source's files are gone
    from_copy = resumed(alice, runtime, path)
    assert from_copy.keys() == from_source.keys()
    assert all(torch.equal(from_copy[k], from_source[k]) for k in from_copy)


def test_a_copy_into_the_project_takes_no_clients_slot(alice, runtime) -> None:
    """A copy into the account's project is a run of the account's "checkpoint copies"
    session (stopped: no quota, no operations), the next version of its source's group; the
    source's session keeps its next model slot for its client."""
    source_model, _ = trained(alice, runtime)
    sampler_weights = f"tinker://{source_model}/sampler_weights/w"
    r = copy(
        alice,
        {"source_path": sampler_weights, "destination_project_id": "default", "ttl_seconds": 7200},
    )
    assert r.status_code == 200, r.content
    copied = Checkpoint.objects.get(tinker_path=r.json()["tinker_path"])
    assert copied.kind == "sampler" and r.json()["tinker_path"].endswith("/sampler_weights/w")
    source_session = TrainingModel.objects.get(pk=source_model).session
    run = copied.model
    assert (run.session.name, run.session.state, run.model_seq_id) == (
        "checkpoint copies",
        "stopped",
        0,
    )
    assert not source_session.models.filter(model_seq_id=1).exists()
    source_package = ModelPackage.objects.get(tinker_path=sampler_weights)
    package = ModelPackage.objects.get(checkpoint=copied)
    assert (package.group, package.parent) == (source_package.group, source_package)
    second = copy(alice, {"source_path": sampler_weights, "destination_project_id": "default"})
    second_run = Checkpoint.objects.get(tinker_path=second.json()["tinker_path"]).model
    assert (second_run.session, second_run.model_seq_id) == (run.session, 1)
    assert timedelta(minutes=119) < copied.expires_at - timezone.now() <= timedelta(hours=2)
    sampler = alice.post(
        "create_sampling_session",
        {
            "session_id": open_session(alice),
            "sampling_session_seq_id": 0,
            "model_path": copied.tinker_path,
        },
    )
    assert sampler.status_code == 200, sampler.content


@pytest.mark.parametrize(
    ("body", "field", "status"),
    [
        ({}, "destination_project_id", 400),
        (
            {"destination_project_id": "default", "session_id": "x", "model_seq_id": 0},
            "destination_project_id",
            400,
        ),
        ({"session_id": "x"}, "model_seq_id", 400),
        ({"destination_project_id": "default", "ttl_seconds": 60}, "ttl_seconds", 400),
        (
            {"destination_project_id": "default", "weights_access_token": "t"},
            "weights_access_token",
            400,
        ),
        ({"destination_project_id": "elsewhere"}, "destination_project_id", 404),
    ],
)
def test_a_bad_copy_request_names_its_field(alice, runtime, body, field, status) -> None:
    _, source = trained(alice, runtime)
    r = copy(alice, {"source_path": source, **body})
    assert (r.status_code, r.json()["field"]) == (status, field), r.content
    assert not Checkpoint.objects.exclude(copied_from="").exists()


def test_slots_and_keys_are_not_reused(alice, runtime) -> None:
    source_model, source = trained(alice, runtime)
    session = TrainingModel.objects.get(pk=source_model).session_id
    taken = copy(alice, {"source_path": source, "session_id": session, "model_seq_id": 0})
    assert (taken.status_code, taken.json()["field"]) == (409, "model_seq_id")
    first = copy(alice, {"source_path": source, "session_id": session, "model_seq_id": 5}, "k")
    assert first.status_code == 200
    other = f"tinker://{source_model}/sampler_weights/w"
    reused = copy(alice, {"source_path": other, "destination_project_id": "default"}, "k")
    assert (reused.status_code, reused.json()["field"]) == (409, "source_path")
    body = {"session_id": session, "model_seq_id": 5, "base_model": "loopwright/tiny-byte-llama"}
    over = alice.post("create_model", body)  # the copy's slot takes no model
    assert (over.status_code, over.json()["field"]) == (409, "model_seq_id")


def test_charlie_can_copy_neither_from_nor_into_alices(alice, charlie, runtime) -> None:
    source_model, source = trained(alice, runtime)
    r = copy(charlie, {"source_path": source, "destination_project_id": "default"})
    assert r.status_code == 404 and r.json()["field"] == "source_path"
    _, charlie_source = trained(charlie, runtime)
    alice_session = TrainingModel.objects.get(pk=source_model).session_id
    into = copy(
        charlie, {"source_path": charlie_source, "session_id": alice_session, "model_seq_id": 3}
    )
    assert into.status_code == 404 and into.json()["field"] == "session_id"
    assert not Checkpoint.objects.exclude(copied_from="").exists()


def test_the_sdk_copies_once_however_often_it_sends(alice, runtime) -> None:
    """Our SDK sends an idempotency key with the copy: a retry after a lost answer (here: the
    same request sent again, byte for byte) gets the same copy."""
    from loopwright import ServiceClient
    from tests.support.sdk_transport import DjangoTransport

    _, source = trained(alice, runtime)
    transport = DjangoTransport()
    sent: list = []
    real = transport.handle_request

    def twice(request):
        if request.url.path.endswith("/copy_weights"):
            sent.append(request)
            real(request)  # answered, but the answer is lost: the client sends it again
        return real(request)

    transport.handle_request = twice
    service = ServiceClient(base_url="http://testserver", api_key=alice.key, transport=transport)
    try:
        path = service.copy_weights(source, ttl_seconds=3600)
    finally:
        service.close()
    assert path.endswith("/weights/s") and len(sent) == 1
    assert sent[0].headers["X-Idempotency-Key"]
    assert Checkpoint.objects.filter(copied_from=source).count() == 1
