"""Per-step metrics: one JSON line per step in ``<log_dir>/metrics.jsonl``, a progress bar, and
MLflow when it is installed and ``MLFLOW_TRACKING_URI`` is set."""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["MetricsLogger", "read_metrics"]


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


class _Progress:
    """tqdm when installed, else one line on stderr per step."""

    def __init__(self, total: int, initial: int, desc: str) -> None:
        self.total, self.desc = total, desc
        try:
            from tqdm import tqdm
        except ImportError:
            self._bar: Any = None
        else:
            self._bar = tqdm(total=total, initial=initial, desc=desc, dynamic_ncols=True)

    def update(self, step: int, summary: dict[str, float]) -> None:
        text = " ".join(f"{k}={v:.4g}" for k, v in summary.items())
        if self._bar is not None:
            self._bar.set_postfix_str(text, refresh=False)
            self._bar.update(1)
        else:
            print(f"{self.desc} step {step + 1}/{self.total} {text}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


class _MLflow:
    """Logs to MLflow only when the package is importable and a tracking URI is configured."""

    def __init__(self, run_name: str, params: dict[str, Any]) -> None:
        self._mlflow: Any = None
        if not os.environ.get("MLFLOW_TRACKING_URI"):
            return
        try:
            import mlflow
        except ImportError:
            return
        mlflow.set_experiment(os.environ.get("MLFLOW_EXPERIMENT_NAME", "loopwright-cookbook"))
        mlflow.start_run(run_name=run_name)
        mlflow.log_params({k: str(v) for k, v in params.items()})
        self._mlflow = mlflow

    def log(self, step: int, metrics: dict[str, float]) -> None:
        if self._mlflow is not None:
            clean = {k.replace(":", "_"): v for k, v in metrics.items() if math.isfinite(v)}
            self._mlflow.log_metrics(clean, step=step)

    def close(self) -> None:
        if self._mlflow is not None:
            self._mlflow.end_run()


class MetricsLogger:
    """Write each step's metrics; on resume, lines of steps that will run again are dropped."""

    def __init__(
        self,
        log_dir: str | Path,
        *,
        total_steps: int,
        start_step: int = 0,
        params: dict[str, Any] | None = None,
        desc: str = "train",
        summary_keys: tuple[str, ...] = (),
    ) -> None:
        self.path = Path(log_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        kept = [r for r in read_metrics(self.path) if int(r.get("step", -1)) < start_step]
        with self.path.open("w", encoding="utf-8") as f:
            for record in kept:
                f.write(json.dumps(record) + "\n")
        self._file = self.path.open("a", encoding="utf-8")
        self._summary_keys = summary_keys
        self._progress = _Progress(total_steps, start_step, desc)
        self._mlflow = _MLflow(Path(log_dir).name, params or {})
        self._started = time.monotonic()

    def log(self, step: int, metrics: dict[str, float], *, advance: bool = True) -> None:
        """Record ``metrics`` for ``step``; ``advance`` moves the progress bar by one step."""
        values = {k: float(v) for k, v in metrics.items()}
        record: dict[str, Any] = {
            "step": step,
            **{k: _finite_or_none(v) for k, v in values.items()},
        }
        record["time/elapsed_s"] = round(time.monotonic() - self._started, 3)
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        self._mlflow.log(step, values)
        if advance:
            keys = self._summary_keys or tuple(values)[:4]
            self._progress.update(step, {k: values[k] for k in keys if k in values})

    def close(self) -> None:
        self._progress.close()
        self._mlflow.close()
        self._file.close()

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The records of a metrics.jsonl (none if it does not exist)."""
    p = Path(path)
    if not p.exists():
        return []
    return [json.loads(line) for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]
