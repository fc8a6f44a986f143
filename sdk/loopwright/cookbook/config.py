"""Recipe configs: one dataclass per recipe, a command line made from its fields, saved per run.

``--config run/config.json`` starts from a saved config (flags given after it still win), so a
run can be repeated exactly; the API key is never part of a config.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["DEFAULT_MODEL", "BaseConfig", "opt", "parse_config", "save_config"]

DEFAULT_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"

C = TypeVar("C", bound="BaseConfig")

_NOT_SAVED = {"resume"}  # how this invocation runs, not what the run is


def opt(default: Any, help: str) -> Any:
    """A config field with its command-line help."""
    return field(default=default, metadata={"help": help})


@dataclass
class BaseConfig:
    """Settings every recipe shares: where to connect, what to train, where to write."""

    base_url: str | None = opt(None, "server URL (default: $LOOPWRIGHT_BASE_URL)")
    role_arn: str | None = opt(None, "session role ARN (default: $LOOPWRIGHT_ROLE_ARN)")
    model: str = opt(DEFAULT_MODEL, "base model to fine-tune")
    log_dir: str = opt(
        "", "run folder: config, metrics, checkpoints (default: runs/<recipe>-<time>)"
    )
    lora_rank: int = opt(16, "LoRA rank")
    learning_rate: float = opt(1e-4, "AdamW learning rate")
    lr_schedule: str = opt("constant", "constant or linear (decays to 0 at the last step)")
    steps: int = opt(20, "optimizer steps")
    seed: int = opt(0, "seed for data order, LoRA init and sampling")
    save_every: int = opt(10, "checkpoint (save_state + loop state) every N steps; 0: at the end")
    eval_every: int = opt(10, "evaluate every N steps (and before the first and after the last)")
    resume: bool = opt(False, "continue the run in --log-dir from its last checkpoint")

    def to_dict(self) -> dict[str, Any]:
        """The run's description, as saved in config.json."""
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in _NOT_SAVED}

    def learning_rate_at(self, step: int) -> float:
        """The learning rate of ``step`` under the schedule."""
        if self.lr_schedule == "linear":
            return self.learning_rate * max(0.0, 1.0 - step / max(self.steps, 1))
        if self.lr_schedule != "constant":
            raise ValueError(f"unknown lr_schedule {self.lr_schedule!r}")
        return self.learning_rate


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _scalar_type(annotation: Any) -> type:
    """int / float / str / bool from an annotation, unwrapping ``X | None``."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        annotation = args[0]
    if annotation not in (int, float, str, bool):
        raise TypeError(f"config fields must be int, float, str or bool, got {annotation}")
    return typing.cast(type, annotation)


def _parser(cls: type[BaseConfig], recipe: str, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"python -m loopwright.cookbook.{recipe}",
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", help="a saved config.json to start from")
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        kind = _scalar_type(hints[f.name])
        help_text = f.metadata.get("help", "")
        flags = [_flag(f.name)] + ([f"--{f.name}"] if "_" in f.name else [])  # both spellings
        if kind is bool:
            parser.add_argument(
                *flags, dest=f.name, action=argparse.BooleanOptionalAction, help=help_text
            )
        else:
            parser.add_argument(*flags, dest=f.name, type=kind, help=help_text)
    parser.set_defaults(**dict.fromkeys((f.name for f in dataclasses.fields(cls)), None))
    return parser


def parse_config(
    cls: type[C], recipe: str, argv: list[str] | None = None, description: str = ""
) -> C:
    """The recipe's config from defaults, then ``--config FILE``, then the flags given."""
    args = vars(_parser(cls, recipe, description or recipe).parse_args(argv))
    values: dict[str, Any] = {}
    config_file = args.pop("config")
    if config_file:
        saved = json.loads(Path(config_file).read_text(encoding="utf-8"))
        saved_recipe = saved.pop("recipe", recipe)
        if saved_recipe != recipe:
            raise SystemExit(f"{config_file} is a {saved_recipe} config, not {recipe}")
        unknown = sorted(set(saved) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise SystemExit(f"{config_file}: fields this recipe does not know: {unknown}")
        values.update(saved)
    values.update({k: v for k, v in args.items() if v is not None})
    config = cls(**values)
    if config.resume and not config.log_dir:
        raise SystemExit("--resume needs --log-dir (the folder of the run to continue)")
    if not config.log_dir:
        config.log_dir = str(Path("runs") / f"{recipe}-{time.strftime('%Y%m%d-%H%M%S')}")
    return config


def save_config(config: BaseConfig, recipe: str) -> Path:
    """Print the config and write it to ``<log_dir>/config.json``; returns the path."""
    folder = Path(config.log_dir)
    folder.mkdir(parents=True, exist_ok=True)
    text = config_json(config, recipe)
    print(f"{recipe} config:\n{text}", file=sys.stderr)
    path = folder / "config.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(text + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def config_json(config: BaseConfig, recipe: str) -> str:
    """The config as config.json holds it (loadable with ``--config``)."""
    return json.dumps({"recipe": recipe, **config.to_dict()}, indent=2, sort_keys=True)
