"""What the fake server's operations compute: WIRE.md's losses on a toy model, checkpoints, samples.

The toy model's logprob of a target token depends only on the token and the optimizer steps taken.
"""

from __future__ import annotations

import json
import math
from typing import Any

from fake_server import FakeServer, Model, Op, OpFailed, logprob_of

from loopwright import types as lw


def run(server: FakeServer, op: Op) -> dict[str, Any]:
    body = op.body
    if op.kind == "create_model":
        return {"model_id": op.model_id}
    if op.kind == "unload_model":
        return {"model_id": body["model_id"]}
    if op.kind == "asample":
        return sample(lw.SampleRequest.model_validate(body))
    model = server.models[body["model_id"]]
    if op.kind == "forward":
        return batch(model, lw.ForwardRequest.model_validate(body).forward_input, backward=False)
    if op.kind == "forward_backward":
        request = lw.ForwardBackwardRequest.model_validate(body)
        return batch(model, request.forward_backward_input, backward=True)
    if op.kind == "optim_step":
        model.steps += 1
        params = body.get("adam_params") or body["optimizer_params"]
        return {"metrics": {"learning_rate:mean": params["learning_rate"]}}
    if op.kind == "save_weights":
        return save(server, model, "weights", body["path"], body.get("overwrite", False))
    if op.kind == "save_weights_for_sampler":
        if body.get("path"):
            return save(server, model, "sampler_weights", body["path"], False, body)
        sampler_id = server._open_sampler(
            model.session_id, body["sampling_session_seq_id"], model_id=model.model_id
        )
        return {"path": None, "sampling_session_id": sampler_id}
    if op.kind == "load_weights":
        return load(server, model, body["path"], body["optimizer"])
    raise AssertionError(op.kind)


def save(
    server: FakeServer,
    model: Model,
    segment: str,
    name: str,
    overwrite: bool,
    body: dict[str, Any] | None = None,
) -> dict[str, Any]:
    path = f"tinker://{model.model_id}/{segment}/{name}"
    if path in server.checkpoints and not overwrite:
        raise OpFailed(f"checkpoint {path} exists", "user")
    lora = model.lora
    server.checkpoints[path] = {
        "kind": "training" if segment == "weights" else "sampler",
        "base_model": model.base_model,
        "lora": {
            "lora_rank": lora["rank"],
            "train_mlp": lora["train_mlp"],
            "train_attn": lora["train_attn"],
            "train_unembed": lora["train_unembed"],
            "train_projector": lora.get("train_projector", False),
            "optimizer": lora.get("optimizer", "adamw"),
        },
        "steps": model.steps,
        "merge_weights": bool(body and body.get("merge_weights")),
    }
    return {"path": path}


def load(server: FakeServer, model: Model, path: str, optimizer: bool) -> dict[str, Any]:
    checkpoint = server.checkpoints.get(path)
    if checkpoint is None:
        raise OpFailed(f"no checkpoint at {path}", "user")
    if checkpoint["kind"] != "training":
        raise OpFailed("sampler weights cannot be loaded for training", "user")
    model.steps = checkpoint["steps"]
    model.lora["loaded_optimizer"] = optimizer
    return {"path": path}


def _values(inputs: lw.LossFnInputs, name: str, index: int) -> list[float]:
    if name not in inputs:
        raise OpFailed(f"datum {index}: loss input {name} is required", "user")
    return [float(x) for x in inputs[name].to_numpy().ravel()]


def loss_of(
    loss_fn: str, p: list[float], inputs: lw.LossFnInputs, config: dict[str, float], index: int
) -> tuple[float, list[float]]:
    """WIRE.md's per-token loss, summed; also the weights seen (cross_entropy only)."""
    if loss_fn == "cross_entropy":
        w = _values(inputs, "weights", index) if "weights" in inputs else [1.0] * len(p)
        return sum(-pi * wi for pi, wi in zip(p, w, strict=True)), w
    q = _values(inputs, "logprobs", index)
    a = _values(inputs, "advantages", index)
    r = [math.exp(pi - qi) for pi, qi in zip(p, q, strict=True)]
    if loss_fn == "importance_sampling":
        return sum(-ri * ai for ri, ai in zip(r, a, strict=True)), []
    lo = config.get("clip_low_threshold", 0.8 if loss_fn == "ppo" else 0.0)
    hi = config.get("clip_high_threshold", 1.2 if loss_fn == "ppo" else 4.0)
    clipped = [min(max(ri, lo), hi) for ri in r]
    if loss_fn == "ppo":
        terms = [-min(ri * ai, ci * ai) for ri, ci, ai in zip(r, clipped, a, strict=True)]
    elif loss_fn == "cispo":
        terms = [-ci * pi * ai for ci, pi, ai in zip(clipped, p, a, strict=True)]
    else:
        beta = config.get("beta", 0.0)
        terms = [
            -(pi * ai - 0.5 * beta * (pi - qi) ** 2) for pi, qi, ai in zip(p, q, a, strict=True)
        ]
    return sum(terms), []


def batch(model: Model, inp: lw.ForwardBackwardInput, backward: bool) -> dict[str, Any]:
    outputs: list[dict[str, Any]] = []
    total, means, every, seen = 0.0, [], [], []
    for index, datum in enumerate(inp.data):
        tokens = datum.model_input.to_ints()
        targets = [int(t) for t in _values(datum.loss_fn_inputs, "target_tokens", index)]
        if len(targets) != len(tokens):
            raise OpFailed(f"datum {index}: target_tokens must have the input's length", "user")
        p = [logprob_of(t, model.steps) for t in targets]
        loss, weights = loss_of(
            inp.loss_fn, p, datum.loss_fn_inputs, inp.loss_fn_config or {}, index
        )
        total += loss
        means.append(sum(p) / len(p))
        every += p
        seen.append(weights)
        outputs.append({"logprobs": {"data": p, "dtype": "float32", "shape": [len(p)]}})
    if backward:
        model.last_weights += seen
    return {
        "loss_fn_output_type": "ArrayRecord",
        "loss_fn_outputs": outputs,
        "metrics": {
            "loss:sum": total,
            "datum_logprob:mean": sum(means) / len(means),
            "logprob:min": min(every),
            "logprob:max": max(every),
        },
    }


def sample(request: lw.SampleRequest) -> dict[str, Any]:
    prompt = request.prompt.to_ints()
    length = request.sampling_params.max_tokens or 4
    seq = request.seq_id or 0
    sequences = [
        {
            "tokens": [(seq * 7 + k * 3 + j) % 50 + 1 for j in range(length)],
            "logprobs": [-0.5] * length,
            "stop_reason": "length",
        }
        for k in range(request.num_samples)
    ]
    answer: dict[str, Any] = {"sequences": sequences, "type": "sample"}
    if request.prompt_logprobs:
        answer["prompt_logprobs"] = [None] + [logprob_of(t) for t in prompt[1:]]
    return answer


def tokenizer_files() -> dict[str, str]:
    """A tiny word-level tokenizer, as the files AutoTokenizer.from_pretrained reads."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["[UNK]", "hello", "world", "the", "answer", "is", "####", "42", "question", ":"]
    vocab = {word: i for i, word in enumerate(words + [f"w{i}" for i in range(64)])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]"}
    return {"tokenizer.json": tokenizer.to_str(), "tokenizer_config.json": json.dumps(config)}
