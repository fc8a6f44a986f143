"""tinker-cookbook 0.5.8's own RL recipe (``tinker_cookbook.recipes.math_rl.train``, its synthetic
arithmetic environment), unchanged, on tinker 0.38.0, against a real stack serving the default
model (SmolLM2-135M-Instruct): the reward goes up.

Nothing is downloaded: the recipe loads its tokenizer with ``AutoTokenizer.from_pretrained`` by
the model's name, offline, from a folder of that name in its working directory holding the
files the server publishes (``base_models/tokenizer?name=``).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import httpx
import pytest

from .stack import ROOT, Stack

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"
PYTHON = ROOT / ".venv-tinker038" / "bin" / "python"
STEPS = 8


def tokenizer_folder(cwd: Path, name: str, files: dict[str, str]) -> None:
    """``files`` in ``cwd/<name>/``, where ``from_pretrained(name)`` looks first."""
    folder = cwd / name
    folder.mkdir(parents=True)
    for filename, text in files.items():
        (folder / filename).write_text(text)


@pytest.fixture(scope="module")
def smol_stack(tmp_path_factory):
    found = subprocess.run(
        [PYTHON, "-c", "import tinker_cookbook"], capture_output=True, check=False
    )
    if found.returncode != 0:
        pytest.skip("tinker-cookbook is not installed in .venv-tinker038 (make tinker-venv)")
    data = tmp_path_factory.mktemp("smol")
    workers = {"smol": ["--base-model", SMOL]}
    stack = Stack("postgres-redis", data, workers=workers, ready_model=SMOL).start()
    try:
        yield stack
    finally:
        stack.stop()


def test_math_rl_recipe_raises_reward(smol_stack, tmp_path) -> None:
    key = smol_stack.role_key("alice")
    r = httpx.get(
        f"{smol_stack.url}/api/v1/base_models/tokenizer",
        params={"name": SMOL},
        headers={"X-API-Key": key},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    tokenizer_folder(tmp_path, SMOL, r.json()["files"])
    log = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "DJANGO"))}
    env |= {
        "TINKER_API_KEY": key,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "WANDB_MODE": "disabled",
    }
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
        "max_steps": STEPS,
        "eval_every": 0,
        "save_every": 0,
        "log_path": str(log),
        "behavior_if_log_dir_exists": "delete",
    }
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
        cwd=tmp_path,
        timeout=1500,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-6000:] + smol_stack.logs()
    rows = [json.loads(line) for line in (log / "metrics.jsonl").read_text().splitlines()]
    rewards = [row["env/all/reward/total"] for row in rows if "env/all/reward/total" in row]
    assert len(rewards) == STEPS, rows[-1]
    # Every answer starts out unformatted (no stop sequence after it: -0.1) and seldom right.
    # The few groups whose answers differ teach either the format (+0.1 each) or the sums (+1
    # each), whichever the samples happen to reward first; 64 samples per step at 1e-3 give
    # enough such groups that the reward climbs within a few steps (measured: from -0.1 to
    # between 0 and 0.13).
    first, last = sum(rewards[:2]) / 2, sum(rewards[-4:]) / 4
    assert last > first, rewards
