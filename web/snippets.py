"""Copy-paste Python for the SDK (``loopwright.ServiceClient``), filled in with the page's values.
Strings are written as JSON literals, which Python reads the same way."""

from __future__ import annotations

import json

from controlplane.training_sessions.models import Checkpoint, Session, TrainingModel

DEFAULT_BASE_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"


def _s(value: str) -> str:
    return json.dumps(value)


def _lora_args(lora: dict) -> str:
    args = [f"rank={int(lora.get('rank') or 32)}"]
    if lora.get("alpha") is not None:
        args.append(f"alpha={float(lora['alpha'])!r}")
    if lora.get("seed") is not None:
        args.append(f"seed={int(lora['seed'])}")
    for name in ("train_mlp", "train_attn", "train_unembed"):
        if lora.get(name) is False:
            args.append(f"{name}=False")
    if lora.get("train_projector") is True:
        args.append("train_projector=True")
    return ", ".join(args)


def _client_args(base_url: str, platform: dict) -> list[str]:
    args = [f"base_url={_s(base_url)}"]
    for name in ("role_arn", "model_package_group_arn", "kms_key_arn", "s3_output_path"):
        if platform.get(name):
            args.append(f"{name}={_s(platform[name])}")
    vpc = platform.get("vpc_config")
    if vpc:
        args.append(f"vpc_config={json.dumps(vpc)}")
    return args


LOOP = """\
    for datums in batches:  # your data as loopwright.types.Datum, built on your machine
        fwd_bwd = training_client.forward_backward(datums, loss_fn="cross_entropy")
        optim = training_client.optim_step(AdamParams(learning_rate=1e-4))
        print(fwd_bwd.result().metrics["loss:sum"], optim.result().metrics)
    print(training_client.save_state().result().path)
"""


def start_snippet(*, base_url: str, role_arn: str | None, base_model: str | None) -> str:
    """A first session: a LoRA model on ``base_model`` and a training loop."""
    platform = {"role_arn": role_arn} if role_arn else {}
    args = ",\n    ".join(_client_args(base_url, platform))
    return (
        "# pip install ./sdk; export LOOPWRIGHT_API_KEY=tml-...\n"
        "from loopwright import ServiceClient\n"
        "from loopwright.types import AdamParams\n\n"
        f"with ServiceClient(\n    {args},\n) as svc:\n"
        f"    training_client = svc.create_lora_training_client("
        f"{_s(base_model or DEFAULT_BASE_MODEL)}, rank=16)\n" + LOOP
    )


def session_snippet(
    *,
    base_url: str,
    session: Session,
    model: TrainingModel | None,
    checkpoint: Checkpoint | None,
) -> str:
    """This session from a script: train its live model where it has one, else continue from its
    latest training checkpoint, else start a model with its settings."""
    args = ",\n    ".join(_client_args(base_url, session.platform or {}))
    lines = [
        "# export LOOPWRIGHT_API_KEY=tml-...",
        "from loopwright import ServiceClient",
        "from loopwright.types import AdamParams",
        "",
        f"with ServiceClient(\n    {args},\n) as svc:",
    ]
    live = model is not None and model.state in (
        TrainingModel.State.CREATING,
        TrainingModel.State.READY,
    )
    if live and session.state in Session.LIVE_STATES:
        lines += [
            "    # this session's model: requests continue after the last one it received",
            f"    training_client = svc.create_training_client({_s(model.id)})",
        ]
    elif checkpoint is not None:
        lines += [
            "    # continue from this session's latest checkpoint, optimizer state included",
            "    training_client = svc.create_training_client_from_state_with_optimizer(",
            f"        {_s(checkpoint.tinker_path)}",
            "    )",
        ]
    else:
        base = model.base_model if model else DEFAULT_BASE_MODEL
        lora = _lora_args(model.lora if model else {})
        lines += [
            "    # a LoRA model with the same settings, in a session of its own",
            f"    training_client = svc.create_lora_training_client({_s(base)}, {lora})",
        ]
    return "\n".join(lines) + "\n" + LOOP
