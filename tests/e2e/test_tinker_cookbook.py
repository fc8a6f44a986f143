"""tinker-cookbook 0.6.1's RL recipes, unchanged and on their defaults (the ``stable_reinforce``
loss, which needs recorded sampling and provenance), on tinker 0.38.0, against a real stack of
two workers serving the default model (SmolLM2-135M-Instruct): the reward goes up, also when the
worker holding the model is killed mid-run, and then the run is the one it would have been.

- ``math_rl`` (``tinker_cookbook.recipes.math_rl.train``, its synthetic arithmetic environment),
  run as its command line runs it.
- ``rl_loop`` (``recipes/rl_loop.py``: its ``Config``, ``with_sampled_provenance`` and loop) on the
  same arithmetic problems, seeded (``rl_loop_arith.py``), once as it is and once with kill -9 of
  the worker that holds the model while a step's ``forward_backward`` runs (its recorded
  sequences were sampled before the kill and are cited after it): the same rewards, losses and
  final logprobs, to the bit.

Nothing is downloaded: the recipes load their tokenizer with ``AutoTokenizer.from_pretrained`` by
the model's name, offline, from a folder of that name in their working directory holding the
files the server publishes (``base_models/tokenizer?name=``).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest

from .chaos import Killer, database, wait_registered
from .stack import ROOT, Stack

# each recipe runs for minutes on SmolLM2 on a CPU: past the suite's 600 s per test
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(2400)]

SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"
PYTHON = ROOT / ".venv-tinker038" / "bin" / "python"
LOOP = Path(__file__).with_name("rl_loop_arith.py")
WORKERS = ("sa", "sb")
MATH_STEPS = 8
LOOP_STEPS = 8


def tokenizer_folder(cwd: Path, name: str, files: dict[str, str]) -> None:
    """``files`` in ``cwd/<name>/``, where ``from_pretrained(name)`` looks first."""
    folder = cwd / name
    folder.mkdir(parents=True)
    for filename, text in files.items():
        (folder / filename).write_text(text)


@pytest.fixture(scope="module")
def smol_stack(tmp_path_factory):
    found = subprocess.run(
        [PYTHON, "-c", "import tinker_cookbook.recipes.rl_loop"], capture_output=True, check=False
    )
    if found.returncode != 0:
        pytest.skip("tinker-cookbook 0.6.1 is not installed in .venv-tinker038 (make tinker-venv)")
    data = tmp_path_factory.mktemp("smol")
    stack = Stack(
        "postgres-redis",
        data,
        workers={name: ["--base-model", SMOL] for name in WORKERS},
        ready_model=SMOL,
        env={"LOOPWRIGHT_WORKER_LEASE_SECONDS": "3", "LOOPWRIGHT_SNAPSHOT_EVERY_STEPS": "3"},
    ).start()
    for name in WORKERS:
        wait_registered(stack, name)
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture(scope="module")
def client_env(smol_stack, tmp_path_factory) -> tuple[dict[str, str], Path]:
    """The environment and working folder of the recipes' processes (the tokenizer in it)."""
    key = smol_stack.role_key("alice")
    r = httpx.get(
        f"{smol_stack.url}/api/v1/base_models/tokenizer",
        params={"name": SMOL},
        headers={"X-API-Key": key},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    cwd = tmp_path_factory.mktemp("cookbook")
    tokenizer_folder(cwd, SMOL, r.json()["files"])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "DJANGO"))}
    env |= {
        "TINKER_API_KEY": key,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "WANDB_MODE": "disabled",
    }
    return env, cwd


def recorded_training(stack: Stack) -> tuple[int, int, int]:
    """How many samples asked to be recorded (the recordings go with their session, which the
    recipe closes), how many forward_backward operations trained
    ``stable_reinforce`` on recorded logprobs (their payload's ``recorded`` part), and how many
    trained otherwise."""
    with database(stack) as conn:
        samples = conn.execute(
            "SELECT count(*) FROM training_sessions_operation WHERE kind = 'sample' "
            "AND (payload->>'record_stability_info')::boolean"
        ).fetchone()
        steps = conn.execute(
            "SELECT count(*) FILTER (WHERE payload ? 'recorded' AND "
            "payload->'forward_backward_input'->>'loss_fn' = 'stable_reinforce'), count(*) "
            "FROM training_sessions_operation WHERE kind = 'forward_backward'"
        ).fetchone()
    return samples[0], steps[0], steps[1] - steps[0]


def test_math_rl_recipe_on_its_defaults_raises_reward(smol_stack, client_env, tmp_path) -> None:
    env, cwd = client_env
    log = tmp_path / "run"
    args = {
        "model_name": SMOL,
        "renderer_name": "role_colon",
        "env": "arithmetic",
        "base_url": smol_stack.url,
        "lora_rank": 8,
        "group_size": 4,
        "groups_per_batch": 16,
        "learning_rate": 1e-3,
        "max_tokens": 8,  # room for a 3-digit sum and the stop sequence
        "max_steps": MATH_STEPS,
        "eval_every": 0,
        "save_every": 0,
        "log_path": str(log),
        "behavior_if_log_dir_exists": "delete",
    }  # loss_fn left to its default: stable_reinforce
    out = subprocess.run(
        [
            PYTHON,
            "-m",
            "tinker_cookbook.recipes.math_rl.train",
            *(f"{k}={v}" for k, v in args.items()),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=2000,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-6000:] + smol_stack.logs()
    rows = [json.loads(line) for line in (log / "metrics.jsonl").read_text().splitlines()]
    rewards = [row["env/all/reward/total"] for row in rows if "env/all/reward/total" in row]
    assert len(rewards) == MATH_STEPS, rows[-1]
    # Every answer starts out unformatted (no stop sequence after it: -0.1) and seldom right.
    # The few groups whose answers differ teach either the format (+0.1 each) or the sums (+1
    # each), whichever the samples happen to reward first; 64 samples per step at 1e-3 give
    # enough such groups that the reward climbs within a few steps.
    first, last = sum(rewards[:2]) / 2, sum(rewards[-4:]) / 4
    print("math_rl rewards:", rewards)
    assert last > first, rewards
    samples, recorded, otherwise = recorded_training(smol_stack)
    assert samples >= MATH_STEPS * 16 and recorded >= 1 and otherwise == 0, (samples, recorded)


def run_loop(stack: Stack, client_env, out: Path, kill=None) -> list[dict]:
    """``rl_loop_arith.py`` for ``LOOP_STEPS`` steps; ``kill(model_id)`` is started in a thread
    once the script names its model."""
    env, cwd = client_env
    proc = subprocess.Popen(
        [PYTHON, str(LOOP), stack.url, SMOL, str(out), str(LOOP_STEPS)],
        env=env,
        cwd=cwd,
        stderr=subprocess.PIPE,
        text=True,
    )
    killing = None
    if kill is not None:
        deadline = time.monotonic() + 300
        while (not out.exists() or not out.read_text()) and time.monotonic() < deadline:
            time.sleep(0.2)
        model_id = json.loads(out.read_text().splitlines()[0])["model_id"]
        killing = threading.Thread(target=kill, args=(model_id,))
        killing.start()
    _, stderr = proc.communicate(timeout=1800)
    if killing is not None:
        killing.join()
    assert proc.returncode == 0, stderr[-6000:] + stack.logs()
    return [json.loads(line) for line in out.read_text().splitlines()[1:]]


@pytest.fixture(scope="module")
def reference(smol_stack, client_env, tmp_path_factory) -> list[dict]:
    return run_loop(smol_stack, client_env, tmp_path_factory.mktemp("loop") / "ref.jsonl")


def test_rl_loop_on_its_default_loss_raises_reward(reference) -> None:
    steps, probe = reference[:-1], reference[-1]
    rewards = [s["reward"] for s in steps]
    assert len(rewards) == LOOP_STEPS and "probe" in probe
    print("rl_loop rewards:", rewards)
    assert sum(rewards[-3:]) / 3 > sum(rewards[:2]) / 2, rewards
    # every step's samples were recorded and cited: each sequence has an id of its own
    assert all(s["sequence_ids"] == 32 for s in steps)
    assert all("loss:sum" in s["metrics"] for s in steps if "metrics" in s)


def test_rl_loop_through_a_worker_kill_ends_as_it_would_have(
    smol_stack, client_env, reference, tmp_path
) -> None:
    kills = []

    def kill(model_id: str) -> None:
        # once a step has trained, kill -9 the worker holding the model while the next step's
        # forward_backward (citing sequences recorded just before) runs
        deadline = time.monotonic() + 600
        with database(smol_stack) as conn:
            while time.monotonic() < deadline:
                (done,) = conn.execute(
                    "SELECT count(*) FROM training_sessions_operation WHERE model_id = %s "
                    "AND kind = 'forward_backward' AND status = 'done'",
                    [model_id],
                ).fetchone()
                if done >= 1:
                    break
                time.sleep(0.1)
        killer = Killer(smol_stack, model_id, {("forward_backward", 1)})
        killer.at("forward_backward", 1, kind="forward_backward")
        killer.join()
        kills.extend(killer.kills)

    run = run_loop(smol_stack, client_env, tmp_path / "killed.jsonl", kill)
    print("kills:", kills)
    assert kills and kills[0].worker is not None, kills
    assert run == reference  # rewards, sampled tokens, losses and the final logprobs
