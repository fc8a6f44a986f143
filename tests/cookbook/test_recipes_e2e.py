"""Each recipe runs a few steps against a live server on the tiny model: metrics are written,
losses are finite, the config is saved, and a run resumes at the step it stopped at."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from loopwright.cookbook import code_rl, distill, math_rl, preference, sft, vision_classifier
from loopwright.cookbook.checkpoint import load_loop_state
from loopwright.cookbook.config import parse_config
from loopwright.cookbook.metrics import read_metrics
from tests.e2e.stack import ROOT, TINY, Stack

pytestmark = pytest.mark.e2e

TINY_VLM = "loopwright/tiny-llava"
COMMON = ["--model", TINY, "--lora-rank", "4", "--learning-rate", "1e-3"]


def run(recipe: ModuleType, log_dir: Path, *args: str) -> dict[str, float]:
    argv = [*COMMON, "--log-dir", str(log_dir), *args]
    summary: dict[str, float] = recipe.main(parse_config(recipe.Config, recipe.RECIPE, argv))
    return summary


def train_records(log_dir: Path, key: str) -> list[dict]:
    return [r for r in read_metrics(log_dir / "metrics.jsonl") if key in r]


def check_run(log_dir: Path, recipe: str, steps: int, key: str, model: str = TINY) -> list[dict]:
    """config.json saved, one finite ``key`` per step, a checkpoint at the last step."""
    config = json.loads((log_dir / "config.json").read_text())
    assert config["recipe"] == recipe and config["steps"] == steps and config["model"] == model
    records = train_records(log_dir, key)
    assert [r["step"] for r in records] == list(range(steps))
    assert all(r[key] is not None and math.isfinite(r[key]) for r in records), records
    state = load_loop_state(log_dir)
    assert state is not None and state.step == steps
    assert state.state_path.startswith("tinker://")
    final = json.loads((log_dir / "final.json").read_text())
    assert final["sampler_path"].startswith("tinker://")
    return records


def check_resume(recipe: ModuleType, log_dir: Path, key: str, *args: str) -> None:
    """Two steps with a checkpoint after each, then --resume to three: only step 2 runs."""
    run(recipe, log_dir, "--steps", "2", "--save-every", "1", *args)
    before = train_records(log_dir, key)
    first_state = load_loop_state(log_dir)
    assert first_state is not None and first_state.step == 2
    run(recipe, log_dir, "--steps", "3", "--save-every", "1", "--resume", *args)
    after = check_run(log_dir, recipe.RECIPE, 3, key)
    assert after[:2] == before  # the first two steps were not run again
    resumed = load_loop_state(log_dir)
    assert resumed is not None
    # a new training client, loaded from the step-2 state, saved step 3
    assert resumed.state_path.split("/")[2] != first_state.state_path.split("/")[2]
    history = (log_dir / "checkpoints.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in history] == [1, 2, 3]


def test_sft_trains_evaluates_and_resumes(server, tmp_path: Path) -> None:
    args = ["--batch-size", "4", "--eval-max", "8", "--eval-generate", "2", "--eval-every", "1"]
    check_resume(sft, tmp_path, "train/loss", *args)
    evals = train_records(tmp_path, "eval/loss")
    assert [r["step"] for r in evals] == [0, 1, 2, 3]
    assert evals[-1]["eval/loss"] < evals[0]["eval/loss"]  # held-out loss falls
    assert all(0.0 <= r["eval/answer_accuracy"] <= 1.0 for r in evals)


def test_sft_from_the_command_line_reads_the_environment(server, tmp_path: Path) -> None:
    data = tmp_path / "chats.jsonl"
    chats = [
        {
            "messages": [
                {"role": "user", "content": f"Say {i}."},
                {"role": "assistant", "content": str(i)},
            ]
        }
        for i in range(12)
    ]
    data.write_text("".join(json.dumps(c) + "\n" for c in chats))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "loopwright.cookbook.sft", *COMMON, "--steps", "1"]
    command += ["--data", str(data), "--log-dir", str(tmp_path / "run"), "--eval-generate", "0"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert '"recipe": "sft"' in done.stderr  # the config is printed
    check_run(tmp_path / "run", "sft", 1, "train/loss")


def test_math_rl_runs_and_resumes(server, tmp_path: Path) -> None:
    args = ["--groups-per-step", "2", "--group-size", "4", "--max-tokens", "8", "--eval-size", "4"]
    check_resume(math_rl, tmp_path, "train/reward_mean", *args)
    records = train_records(tmp_path, "train/reward_mean")
    assert all(0.0 <= r["train/reward_mean"] <= 1.0 for r in records)
    for r in records:  # a step with signal trained with a finite loss
        assert r["train/datums"] == 0 or math.isfinite(r["train/loss"])
    evals = train_records(tmp_path, "eval/accuracy")
    assert [r["step"] for r in evals] == [0, 3]  # before and after (the step-2 one was redone)


@pytest.mark.parametrize("method", ["dpo", "kto"])
def test_preference_runs_and_resumes(server, tmp_path: Path, method: str) -> None:
    pytest.importorskip("torch")
    key = f"{method}/loss"
    check_resume(preference, tmp_path, key, "--method", method, "--batch-size", "2")
    # the reference sampler is kept across the resume
    state = load_loop_state(tmp_path)
    assert state is not None and state.extra["reference_path"].endswith("/reference")
    first = train_records(tmp_path, key)[0]
    if method == "dpo":
        assert first[key] == pytest.approx(math.log(2), abs=1e-3)  # policy == reference at start
    evals = train_records(tmp_path, "eval/pair_accuracy")
    assert evals[0]["eval/pair_accuracy"] == 0.5  # all ties before training


def test_distill_from_a_teacher_checkpoint(server, tmp_path: Path) -> None:
    # a teacher that differs from the student: a few SFT steps on the shipped chats
    run(sft, tmp_path / "teacher", "--steps", "2", "--batch-size", "4", "--eval-generate", "0")
    teacher = json.loads((tmp_path / "teacher" / "final.json").read_text())["sampler_path"]
    args = ["--teacher-path", teacher, "--groups-per-step", "2", "--group-size", "2"]
    args += ["--max-tokens", "8", "--eval-size", "2"]
    check_resume(distill, tmp_path / "student", "train/reverse_kl", *args)
    final = json.loads((tmp_path / "student" / "final.json").read_text())
    assert math.isfinite(final["eval/reverse_kl_after"])
    assert 0.0 <= final["eval/accuracy_after"] <= 1.0


def test_code_rl_overlaps_streams_and_requeues_stale_groups(
    server, tmp_path: Path, monkeypatch
) -> None:
    """The tiny model writes no code, so rewards are set per rollout to give every group signal;
    grading itself is covered by the sandbox tests."""
    real = code_rl.rollout_group

    def with_spread(*args, **kwargs):
        group = real(*args, **kwargs)
        for index, rollout in enumerate(group.rollouts):
            rollout.reward = float(index % 2)
        return group

    monkeypatch.setattr(code_rl, "rollout_group", with_spread)
    args = ["--groups-per-step", "2", "--group-size", "2", "--substep-groups", "1"]
    args += ["--num-rollout-workers", "4", "--max-steps-off-policy", "0", "--max-tokens", "16"]
    args += ["--eval-fraction", "0.07"]
    check_resume(code_rl, tmp_path, "train/loss", *args)
    records = train_records(tmp_path, "train/loss")
    assert all(r["train/forward_backward_calls"] == 2 for r in records)  # one per finished group
    assert all(r["train/staleness_mean"] == 0 for r in records)  # k = 0: only fresh groups
    assert sum(r["train/stale_groups"] for r in records) > 0  # leftovers of old policies
    state = load_loop_state(tmp_path)
    assert state is not None and state.extra["version"] == 3
    history = [
        json.loads(line) for line in (tmp_path / "checkpoints.jsonl").read_text().splitlines()
    ]
    cursors = [h["extra"]["cursor"] for h in history]
    assert cursors == sorted(cursors) and cursors[0] > 0  # the problem stream continues
    evals = train_records(tmp_path, "eval/pass_rate")
    assert [r["step"] for r in evals] == [0, 3]


@pytest.fixture(scope="module")
def vlm_server(tmp_path_factory):
    """A stack whose worker also serves the tiny LLaVA (VLM base models get workers of their own)."""
    stack = Stack(
        "postgres-redis",
        tmp_path_factory.mktemp("vlm-cookbook-stack"),
        workers={"vlm-worker": ["--base-model", TINY_VLM]},
        ready_model=TINY_VLM,
    ).start()
    try:
        yield stack
    finally:
        stack.stop()


def test_vision_classifier_learns_shapes_from_images(
    vlm_server, monkeypatch, tmp_path: Path
) -> None:
    """Held-out accuracy starts near chance (1/3) and ends well above it: the label can only be
    told from the image (the prompt is the same for every example)."""
    monkeypatch.setenv("LOOPWRIGHT_BASE_URL", vlm_server.url)
    monkeypatch.setenv("LOOPWRIGHT_API_KEY", vlm_server.keys["alice"])
    monkeypatch.setenv("LOOPWRIGHT_ROLE_ARN", vlm_server.roles["alice"])
    monkeypatch.setenv("LOOPWRIGHT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    argv = ["--model", TINY_VLM, "--lora-rank", "4", "--log-dir", str(tmp_path / "run")]
    argv += ["--steps", "50", "--eval-every", "25", "--save-every", "0"]
    summary = vision_classifier.main(
        parse_config(vision_classifier.Config, vision_classifier.RECIPE, argv)
    )
    records = check_run(tmp_path / "run", "vision_classifier", 50, "train/loss", TINY_VLM)
    assert all(r["train/image_tokens"] == 16 * 16 for r in records)  # 16 images of 16 tokens
    curve = train_records(tmp_path / "run", "eval/accuracy")
    assert [r["step"] for r in curve] == [0, 25, 50]
    assert summary["eval/accuracy_before"] <= 0.5, summary
    assert summary["eval/accuracy_after"] >= 0.65, summary
    assert summary["eval/accuracy_after"] - summary["eval/accuracy_before"] >= 0.25
    assert summary["eval/loss_after"] < summary["eval/loss_before"]
