"""Checkpoints and resume: ``save_state`` on the server plus a small JSON of the loop's state.

``<log_dir>/checkpoint.json`` names the training state and the next step to run (and anything
else the recipe needs, e.g. its reference sampler); ``checkpoints.jsonl`` keeps every one.
A run resumed with ``--resume`` reloads adapter and optimizer and continues at that step.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from loopwright import ServiceClient, TrainingClient

from .config import BaseConfig

__all__ = [
    "LoopState",
    "connect",
    "load_loop_state",
    "save_checkpoint",
    "should_eval",
    "should_save",
    "start_training",
    "write_final",
]


@dataclass
class LoopState:
    """Where a run stands: the next step and the training state that holds its weights."""

    step: int
    """The next step to run (= optimizer steps done)."""

    state_path: str
    """``tinker://<model_id>/weights/<name>``: adapter and optimizer after ``step`` steps."""

    extra: dict[str, Any] = field(default_factory=dict)
    """Recipe-specific state (JSON)."""


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)  # a crash mid-write leaves the previous checkpoint intact


def load_loop_state(log_dir: str | Path) -> LoopState | None:
    """The last checkpoint of the run in ``log_dir``, or None."""
    path = Path(log_dir) / "checkpoint.json"
    if not path.exists():
        return None
    return LoopState(**json.loads(path.read_text(encoding="utf-8")))


def save_checkpoint(
    training_client: TrainingClient,
    log_dir: str | Path,
    step: int,
    extra: dict[str, Any] | None = None,
) -> LoopState:
    """Save adapter + optimizer after ``step`` optimizer steps, then record the loop state."""
    saved = training_client.save_state(f"step-{step:06d}").result()
    state = LoopState(step=step, state_path=saved.path, extra=dict(extra or {}))
    folder = Path(log_dir)
    folder.mkdir(parents=True, exist_ok=True)
    _write_json(folder / "checkpoint.json", asdict(state))
    with (folder / "checkpoints.jsonl").open("a", encoding="utf-8") as f:
        f.write(json.dumps(asdict(state)) + "\n")
    return state


def connect(config: BaseConfig) -> ServiceClient:
    """A ServiceClient; the API key comes from ``LOOPWRIGHT_API_KEY``."""
    return ServiceClient(base_url=config.base_url, role_arn=config.role_arn)


def start_training(
    service: ServiceClient, config: BaseConfig, session_name: str
) -> tuple[TrainingClient, LoopState | None]:
    """A training client: resumed from the run's checkpoint with ``--resume``, else fresh.

    Returns the client and the loop state it resumed from (None for a fresh start).
    """
    state = load_loop_state(config.log_dir) if config.resume else None
    if config.resume and state is None:
        print(f"no checkpoint in {config.log_dir}: starting from step 0")
    if state is not None:
        client = service.create_training_client_from_state_with_optimizer(
            state.state_path, training_session_name=session_name
        )
        print(f"resumed {state.state_path} at step {state.step}")
        return client, state
    client = service.create_lora_training_client(
        config.model,
        training_session_name=session_name,
        rank=config.lora_rank,
        alpha=2 * config.lora_rank,
        seed=config.seed,
    )
    return client, None


def should_save(config: BaseConfig, steps_done: int) -> bool:
    """Whether to checkpoint after ``steps_done`` steps (every save_every, and at the end)."""
    if steps_done >= config.steps:
        return True
    return config.save_every > 0 and steps_done % config.save_every == 0


def should_eval(config: BaseConfig, steps_done: int) -> bool:
    """Whether to evaluate after ``steps_done`` steps (at 0, every eval_every, at the end)."""
    if steps_done in (0, config.steps):
        return True
    return config.eval_every > 0 and steps_done % config.eval_every == 0


def write_final(log_dir: str | Path, data: dict[str, Any]) -> None:
    """Record the run's outcome (final sampler and state paths, summary metrics) in final.json."""
    _write_json(Path(log_dir) / "final.json", data)


def finish_run(
    client: TrainingClient,
    log_dir: str | Path,
    first_eval: dict[str, float],
    last_eval: dict[str, float],
) -> dict[str, float]:
    """A recipe's end: the final sampler weights saved, every held-out metric before and after
    training (``<metric>_before``, ``<metric>_after``) written to final.json with their path
    and said on stderr; returns the metrics."""
    sampler_path = client.save_weights_for_sampler("final").result().path
    summary = {f"{k}_before": v for k, v in first_eval.items()}
    summary.update({f"{k}_after": v for k, v in last_eval.items()})
    write_final(log_dir, {"sampler_path": sampler_path, **summary})
    print(f"held-out: {summary}; sampler weights: {sampler_path}", file=sys.stderr)
    return summary
