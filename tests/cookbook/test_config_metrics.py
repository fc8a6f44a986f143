"""Configs from the command line and saved files, metrics JSONL, checkpoint cadence, shipped data."""

from __future__ import annotations

import json
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

from loopwright.cookbook import datagen
from loopwright.cookbook.checkpoint import load_loop_state, should_eval, should_save
from loopwright.cookbook.config import BaseConfig, opt, parse_config, save_config
from loopwright.cookbook.metrics import MetricsLogger, read_metrics


@dataclass
class DemoConfig(BaseConfig):
    batch_size: int = opt(4, "examples per step")
    temperature: float = opt(1.0, "sampling temperature")
    two_turn: bool = opt(True, "a boolean flag")
    teacher: str = opt("", "a string")


def test_flags_override_defaults(tmp_path: Path) -> None:
    config = parse_config(
        DemoConfig,
        "demo",
        [
            "--batch-size",
            "8",
            "--no-two-turn",
            "--learning-rate",
            "3e-4",
            "--log-dir",
            str(tmp_path),
        ],
    )
    assert config.batch_size == 8 and config.two_turn is False
    assert config.learning_rate == 3e-4 and config.temperature == 1.0
    assert config.log_dir == str(tmp_path)
    same = parse_config(DemoConfig, "demo", ["--batch_size", "8", "--no-two_turn"])
    assert same.batch_size == 8 and same.two_turn is False  # underscores are accepted too


def test_a_saved_config_repeats_the_run_and_flags_still_win(tmp_path: Path, capsys) -> None:
    first = parse_config(DemoConfig, "demo", ["--batch-size", "8", "--log-dir", str(tmp_path)])
    path = save_config(first, "demo")
    assert path == tmp_path / "config.json"
    saved = json.loads(path.read_text())
    assert saved["recipe"] == "demo" and saved["batch_size"] == 8
    assert "resume" not in saved  # how a run is invoked is not part of what it is
    assert '"batch_size": 8' in capsys.readouterr().err  # printed too
    again = parse_config(DemoConfig, "demo", ["--config", str(path)])
    assert again == first
    changed = parse_config(DemoConfig, "demo", ["--config", str(path), "--steps", "3", "--resume"])
    assert changed.steps == 3 and changed.resume and changed.batch_size == 8
    with pytest.raises(SystemExit, match="not other"):
        parse_config(DemoConfig, "other", ["--config", str(path)])


def test_resume_needs_a_log_dir_and_defaults_get_a_fresh_folder() -> None:
    with pytest.raises(SystemExit, match="log-dir"):
        parse_config(DemoConfig, "demo", ["--resume"])
    assert parse_config(DemoConfig, "demo", []).log_dir.startswith("runs/demo-")


def test_learning_rate_schedules() -> None:
    constant = DemoConfig(learning_rate=1e-3, steps=10)
    assert constant.learning_rate_at(9) == 1e-3
    linear = DemoConfig(learning_rate=1e-3, steps=10, lr_schedule="linear")
    assert linear.learning_rate_at(0) == 1e-3
    assert linear.learning_rate_at(5) == pytest.approx(5e-4)
    with pytest.raises(ValueError):
        DemoConfig(lr_schedule="cosine").learning_rate_at(0)


def test_checkpoint_and_eval_cadence() -> None:
    config = DemoConfig(steps=7, save_every=3, eval_every=2)
    assert [s for s in range(1, 8) if should_save(config, s)] == [3, 6, 7]
    assert [s for s in range(8) if should_eval(config, s)] == [0, 2, 4, 6, 7]
    only_end = DemoConfig(steps=5, save_every=0, eval_every=0)
    assert [s for s in range(1, 6) if should_save(only_end, s)] == [5]
    assert [s for s in range(6) if should_eval(only_end, s)] == [0, 5]


def test_metrics_jsonl_and_resume_truncation(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with MetricsLogger(tmp_path, total_steps=4) as logger:
        logger.log(0, {"eval/loss": 2.0}, advance=False)
        for step in range(4):
            logger.log(step, {"train/loss": 1.0 / (step + 1), "odd": float("nan")})
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records] == [0, 0, 1, 2, 3]
    assert records[1]["train/loss"] == 1.0 and records[1]["odd"] is None  # JSON has no NaN
    # resuming at step 2: the records of steps 2 and 3 will be written again
    with MetricsLogger(tmp_path, total_steps=4, start_step=2) as logger:
        logger.log(2, {"train/loss": 9.0})
    assert [(r["step"], r.get("train/loss")) for r in read_metrics(tmp_path / "metrics.jsonl")] == [
        (0, None),
        (0, 1.0),
        (1, 0.5),
        (2, 9.0),
    ]


def test_no_checkpoint_yet(tmp_path: Path) -> None:
    assert load_loop_state(tmp_path) is None


def test_shipped_data_is_what_the_generator_writes(tmp_path: Path) -> None:
    written = datagen.write_all(tmp_path)
    for path in written:
        assert path.read_text(encoding="utf-8") == (datagen.DATA_DIR / path.name).read_text(
            encoding="utf-8"
        ), f"{path.name} is stale: run python -m loopwright.cookbook.datagen"


def test_shipped_data_shapes() -> None:
    chats = datagen.read_jsonl(datagen.data_path("chat_sft.jsonl"))
    assert len(chats) >= 300
    for record in chats:
        roles = [m["role"] for m in record["messages"]]
        assert roles[-1] == "assistant" and "user" in roles
    pairs = datagen.read_jsonl(datagen.data_path("preference_pairs.jsonl"))
    assert all(p["chosen"] != p["rejected"] for p in pairs)
    feedback = datagen.read_jsonl(datagen.data_path("feedback.jsonl"))
    labels = {f["label"] for f in feedback}
    assert labels == {True, False}
    with pytest.raises(FileNotFoundError):
        datagen.data_path("missing.jsonl")


def test_progress_falls_back_to_a_stderr_line_without_tqdm(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    monkeypatch.setitem(sys.modules, "tqdm", None)  # import tqdm now raises ImportError
    with MetricsLogger(tmp_path, total_steps=2, desc="demo", summary_keys=("train/loss",)) as log:
        log.log(0, {"train/loss": 0.5, "other": 1.0})
    assert "demo step 1/2 train/loss=0.5" in capsys.readouterr().err


def test_metrics_go_to_mlflow_when_configured(tmp_path: Path, monkeypatch) -> None:
    calls: list[tuple] = []
    fake = types.SimpleNamespace(
        set_experiment=lambda name: calls.append(("experiment", name)),
        start_run=lambda run_name: calls.append(("start", run_name)),
        log_params=lambda params: calls.append(("params", params)),
        log_metrics=lambda metrics, step: calls.append(("metrics", metrics, step)),
        end_run=lambda: calls.append(("end",)),
    )
    monkeypatch.setitem(sys.modules, "mlflow", fake)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "file:///nowhere")
    with MetricsLogger(tmp_path / "run-1", total_steps=1, params={"lr": 0.1}) as logger:
        logger.log(0, {"train/loss": 0.25, "loss:sum": 3.0, "bad": float("inf")})
    assert calls == [
        ("experiment", "loopwright-cookbook"),
        ("start", "run-1"),
        ("params", {"lr": "0.1"}),
        ("metrics", {"train/loss": 0.25, "loss_sum": 3.0}, 0),
        ("end",),
    ]
