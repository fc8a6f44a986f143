"""The official tinker SDK, 0.24.1 (JSON protocol) and 0.38.0 (protobuf protocol), each in a
client process of its own, runs the same scenarios against a real stack (gunicorn + a Celery
worker on PostgreSQL and Redis); the numbers are checked against an independent reference: the
adapter the server saved, downloaded and loaded into plain transformers + peft here."""

from __future__ import annotations

import io
import itertools
import json
import os
import subprocess
import tarfile
from pathlib import Path

import httpx
import numpy as np
import pytest

from .stack import ROOT, TINY

pytestmark = pytest.mark.e2e

VENVS = {"0.24.1": ROOT / ".venv", "0.38.0": ROOT / ".venv-tinker038"}


def _python(version: str) -> Path:
    python = VENVS[version] / "bin" / "python"
    found = subprocess.run(
        [python, "-c", "import tinker; print(tinker.__version__)"],
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode != 0 or found.stdout.strip() != version:
        pytest.skip(f"tinker {version} is not installed in {VENVS[version]} (make tinker-venv)")
    return python


@pytest.fixture(scope="module", params=list(VENVS))
def run(request, pg_stack) -> dict:
    """What one SDK version saw running tinker_scenarios.py against the stack."""
    python = _python(request.param)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "DJANGO"))} | {
        "TINKER_API_KEY": pg_stack.role_key("alice"),
        "HF_HUB_OFFLINE": "1",
    }
    out = subprocess.run(
        [python, str(Path(__file__).with_name("tinker_scenarios.py")), pg_stack.url],
        capture_output=True,
        text=True,
        env=env,
        cwd="/",  # nothing of this repository on its path
        timeout=600,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-5000:] + pg_stack.logs()
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["version"] == request.param
    return report


@pytest.fixture(scope="module")
def reference(run, pg_stack, tmp_path_factory):
    """Plain transformers + peft with the adapter saved at ``reference_path``."""
    import peft
    import torch
    from transformers import AutoModelForCausalLM

    from workers.engine.catalog import ModelCatalog

    r = httpx.get(
        f"{pg_stack.url}/api/v1/registry/model-packages/download",
        params={"path": run["reference_path"], "format": "adapter"},
        headers={"X-API-Key": pg_stack.keys["alice"]},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    folder = tmp_path_factory.mktemp("adapter")
    with tarfile.open(fileobj=io.BytesIO(r.content), mode="r:gz") as tar:
        tar.extractall(folder, filter="data")
    adapter = next(p.parent for p in folder.rglob("adapter_config.json"))
    base_path = ModelCatalog(cache_dir=tmp_path_factory.mktemp("models")).materialize(TINY).path
    base = AutoModelForCausalLM.from_pretrained(base_path, dtype=torch.float32)
    model = peft.PeftModel.from_pretrained(base, adapter).eval()

    def logprobs(tokens: list[int]) -> torch.Tensor:
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([tokens])).logits[0]
        return torch.log_softmax(logits.double(), dim=-1)

    return logprobs


def _loss(name: str, p: np.ndarray, d: dict) -> float:
    """Each loss of WIRE.md, per token, summed."""
    if name == "cross_entropy":
        return float(np.sum(-p * np.asarray(d["weights"])))
    q, a = np.asarray(d["logprobs"]), np.asarray(d["advantages"])
    r = np.exp(p - q)
    if name == "importance_sampling":
        return float(np.sum(-r * a))
    if name == "ppo":
        return float(np.sum(-np.minimum(r * a, np.clip(r, 0.9, 1.1) * a)))
    if name == "cispo":
        return float(np.sum(-np.clip(r, 0.0, 4.0) * p * a))
    assert name == "dro"
    return float(np.sum(-(p * a - 0.5 * 0.5 * (p - q) ** 2)))


def test_losses_match_an_independent_reference(run, reference) -> None:
    ref_lp = []
    for d in run["batch"]:
        full = reference(d["tokens"])
        ref_lp.append(full[np.arange(len(d["tokens"])), d["target_tokens"]].numpy())
    for name, seen in run["losses"].items():
        for ours, ref in zip(seen["logprobs"], ref_lp, strict=True):
            np.testing.assert_allclose(ours, ref, atol=1e-5, err_msg=name)
        expected = sum(_loss(name, p, d) for p, d in zip(ref_lp, run["batch"], strict=True))
        assert seen["loss"] == pytest.approx(expected, rel=1e-5, abs=1e-5), name


def test_a_forward_between_backward_and_step_changes_nothing(run) -> None:
    with_forward, without = run["twins"]
    np.testing.assert_array_equal(np.array(with_forward), np.array(without))


def test_sampler_and_trainer_logprobs_agree(run) -> None:
    n = len(run["prompt"])
    for seq, trained in zip(run["samples"], run["trainer_logprobs"], strict=True):
        np.testing.assert_allclose(seq["logprobs"], trained[n - 1 :], atol=1e-4)
    computed = run["compute_logprobs"]
    assert computed[0] is None
    np.testing.assert_allclose(computed[1:], run["trainer_logprobs"][0], atol=1e-4)


def test_seeds_repeat_and_differ(run) -> None:
    assert run["same_seed"] == [s["tokens"] for s in run["samples"]]
    assert run["other_seed"] != run["same_seed"]
    if "sequence_ids" in run:  # SDK ≥ 0.30 stamps them on every sequence
        assert len(set(run["sequence_ids"])) == len(run["samples"])


def test_top_k_prompt_logprobs_match_plain_peft(run, reference) -> None:
    full = reference(run["prompt"])
    rows = run["topk_prompt_logprobs"]
    assert rows[0] is None and len(rows) == len(run["prompt"])
    for i, row in enumerate(rows[1:], start=1):
        values, ids = full[i - 1].topk(3)
        assert [t for t, _ in row] == ids.tolist()
        np.testing.assert_allclose([v for _, v in row], values.numpy(), atol=1e-4)


def test_resume_continues_exactly(run) -> None:
    original, resumed = run["resume"]["logprobs"]
    np.testing.assert_allclose(np.array(resumed), np.array(original), atol=1e-6)
    assert run["resume"]["path"].endswith("/weights/resume-point")


def test_rest_calls(run, pg_stack) -> None:
    rest = run["rest"]
    assert rest["training_run_id"] == run["model_id"] and run["model_id"] in rest["runs"]
    assert run["reference_path"] in rest["checkpoints"]
    assert run["resume"]["path"] in rest["checkpoints"]
    # charlie (another tenant) sees none of it
    charlie = {"X-API-Key": pg_stack.role_key("charlie")}
    for path in (
        f"training_runs/{run['model_id']}",
        f"training_runs/{run['model_id']}/checkpoints",
    ):
        assert httpx.get(f"{pg_stack.url}/api/v1/{path}", headers=charlie).status_code == 404


def test_copy_weights_resumes_like_its_source(run, pg_stack) -> None:
    if "copy" not in run["rest"]:
        pytest.skip("copy_weights came with tinker 0.38")
    copy = run["rest"]["copy"]
    assert copy["path"].endswith("/weights/resume-point")
    assert not copy["path"].startswith(f"tinker://{run['model_id']}/")  # a run of its own
    original, _ = run["resume"]["logprobs"]
    np.testing.assert_allclose(np.array(copy["logprobs"]), np.array(original), atol=1e-6)
    charlie = {"X-API-Key": pg_stack.role_key("charlie")}
    r = httpx.post(
        f"{pg_stack.url}/api/v1/copy_weights",
        json={"source_path": copy["path"], "destination_project_id": "default"},
        headers=charlie,
    )
    assert r.status_code == 404


def test_sessions_finish_and_search(run, pg_stack) -> None:
    if "searched_sessions" not in run["rest"]:
        pytest.skip("sessions/search and sessions/<id>/finish came with tinker 0.26–0.38")
    alice = {"X-API-Key": pg_stack.keys["alice"]}
    r = httpx.get(f"{pg_stack.url}/api/v1/training_runs/{run['model_id']}", headers=alice)
    session_id = r.json()["session_id"]
    assert session_id in run["rest"]["searched_sessions"]
    assert session_id in run["rest"]["finished_sessions"]  # ServiceClient.close("success")
    detail = httpx.get(f"{pg_stack.url}/api/v1/sessions/{session_id}", headers=alice).json()
    assert detail["BillableTokenUsage"]["TrainingTokens"] > 0
    assert detail["LastReceivedSequenceNumber"] >= 1
    charlie = {"X-API-Key": pg_stack.role_key("charlie")}
    r = httpx.post(
        f"{pg_stack.url}/api/v1/sessions/{session_id}/finish",
        json={"reason": {"type": "success"}},
        headers=charlie,
    )
    assert r.status_code == 404


def test_external_weights_download_by_link(run) -> None:
    if "external" not in run["rest"]:
        pytest.skip("save_weights_external came with tinker 0.30")
    external = run["rest"]["external"]
    assert external["path"] == f"tinker://{run['model_id']}/external_weights/exported"
    assert set(external["urls"]) == {"adapter.tar.gz", "merged.tar.gz"}
    for name, url in external["urls"].items():
        r = httpx.get(url, timeout=60)  # no key: the link is the permission
        assert r.status_code == 200, r.text
        with tarfile.open(fileobj=io.BytesIO(r.content), mode="r:gz") as tar:
            files = {m.name.rsplit("/", 1)[-1] for m in tar.getmembers()}
        assert ("adapter_config.json" if name == "adapter.tar.gz" else "config.json") in files


def test_sampling_options_of_0_34_match_plain_peft(run, reference) -> None:
    if "rich" not in run:
        pytest.skip("prompt_alt_tokens_k and prompt_logprobs_last_n came with tinker 0.34")
    rich, prompt = run["rich"], run["prompt"]
    full = reference(prompt + rich["tokens"])
    for i, row in enumerate(rich["topk"]):  # top-k at each generated position
        values, ids = full[len(prompt) - 1 + i].topk(3)
        assert [t for t, _ in row] == ids.tolist()
        np.testing.assert_allclose([v for _, v in row], values.numpy(), atol=1e-4)
    scored = rich["prompt_logprobs"]  # only the last 3 prompt tokens were scored
    assert scored[:-3] == [None] * (len(prompt) - 3)
    expected = [float(full[i - 1, prompt[i]]) for i in range(len(prompt) - 3, len(prompt))]
    np.testing.assert_allclose(scored[-3:], expected, atol=1e-4)
    for i, (ids, got) in enumerate(
        zip(rich["target_ids"], np.reshape(rich["target"], (-1, 2)), strict=True)
    ):
        for token, value in zip(ids, got, strict=True):
            want = 0.0 if token == -1 else float(full[i, token])
            assert value == pytest.approx(want, abs=1e-4)
    assert rich["alt_shape"] == [len(prompt) - 1, 2]
    assert all(0 <= t < 259 for t in rich["alt_tokens"])


def test_dimuon_trains_resumes_and_refuses_the_other_family(run, pg_stack) -> None:
    if "dimuon" not in run:
        pytest.skip("Dimuon came with tinker 0.26-0.30")
    dimuon = run["dimuon"]
    losses = dimuon["losses"]
    assert all(b < a for a, b in itertools.pairwise(losses)), losses
    original, resumed = dimuon["resumed"]
    np.testing.assert_allclose(np.array(resumed), np.array(original), atol=1e-6)
    for key, family in (("adam_on_dimuon", "dimuon"), ("dimuon_on_adam", "adamw")):
        refused = dimuon["refused"][key]
        assert refused is not None and refused["status"] == 400, refused
        assert f"this model's optimizer is {family}" in refused["message"]
    info = httpx.post(
        f"{pg_stack.url}/api/v1/weights_info",
        json={"tinker_path": dimuon["path"]},
        headers={"X-API-Key": pg_stack.keys["alice"]},
    )
    assert info.json()["optimizer"] == "dimuon"
