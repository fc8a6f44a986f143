"""Many sessions in one call give each session what it gets alone.

A randomized mix of sessions (ranks, alphas, adapted layer groups, loss functions, lengths) runs
through ``forward_backward_many`` / ``optim_step_many`` / ``forward_many`` together; the reference
is each session alone on a plain peft model with hand-written losses and ``torch.optim.AdamW``.
The engine runs in float32; the reference runs in float64 (so its own rounding does not count
against the engine) and the two agree within 1e-5, relative to the magnitude for sums, gradients
and weights.
"""

from __future__ import annotations

import numpy as np
import peft
import pytest
import torch
from transformers import AutoModelForCausalLM

from loopwright.types import AdamParams, Datum, ForwardBackwardInput, ModelInput
from workers.engine.adapters import AdapterConfig
from workers.engine.errors import InvalidInput

from .reference import assert_grads_close, random_tokens, randomize_adapter, token_logprobs
from .test_losses import DEFAULTS, make_inputs, reference_term

LOSSES = [
    ("cross_entropy", None),
    ("importance_sampling", None),
    ("ppo", None),
    ("ppo", {"clip_low_threshold": 0.6, "clip_high_threshold": 1.4}),
    ("cispo", None),
    ("dro", {"beta": 0.2}),
]
# every loss, stable_reinforce's masked ratios and penalty among them (its own cases below, so
# the sessions the first cases draw stay the ones they always drew)
ALL_LOSSES = [
    *LOSSES,
    ("stable_reinforce", None),
    ("stable_reinforce", {"kl_coeff": 0.2, "mask_low": 0.8, "mask_high": 1.25}),
]
GROUPS = [(True, True, True), (True, False, False), (False, True, True), (False, False, True)]


def plain_peft_model(host, model_id: str) -> tuple[torch.nn.Module, dict[str, torch.nn.Parameter]]:
    """A fresh float64 base model from disk with the session's adapter, through peft's loader."""
    base = AutoModelForCausalLM.from_pretrained(host.materialized.path, dtype=torch.float64)
    cfg = host.pool.peft_config(model_id)
    model = peft.get_peft_model(
        base, peft.LoraConfig(r=cfg.r, lora_alpha=cfg.lora_alpha, target_modules=cfg.target_modules)
    )
    state = {k: v.detach().double() for k, v in host.pool.state_dict(model_id).items()}
    peft.set_peft_model_state_dict(model, state)
    params = {n.replace(".default.", "."): p for n, p in model.named_parameters() if "lora_" in n}
    return model, params


def random_sessions(
    host, rng: np.random.Generator, count: int, losses=LOSSES, *, each_loss: bool = False
) -> list[dict]:
    """``count`` sessions of random shapes, each with a loss drawn from ``losses`` (with
    ``each_loss``: the first ``len(losses)`` take every loss once, in a random order)."""
    sessions = []
    order = rng.permutation(len(losses)) if each_loss else None
    for k in range(count):
        attn, mlp, unembed = GROUPS[int(rng.integers(len(GROUPS)))]
        cfg = AdapterConfig(
            rank=int(rng.choice([1, 2, 4, 8, 16])),
            alpha=float(rng.choice([1.0, 8.0, 16.0])),
            seed=k,
            train_attn=attn,
            train_mlp=mlp,
            train_unembed=unembed,
        )
        model_id = f"s{k}"
        host.create_adapter(model_id, cfg)
        randomize_adapter(host, model_id, seed=100 + k, scale=0.05)
        if order is not None and k < len(order):
            loss_fn, config = losses[int(order[k])]
        else:
            loss_fn, config = losses[int(rng.integers(len(losses)))]
        sessions.append({"id": model_id, "loss_fn": loss_fn, "config": config})
    return sessions


def random_request(rng: np.random.Generator, loss_fn: str, config) -> ForwardBackwardInput:
    data = []
    per_token_clip = bool(rng.integers(2)) and loss_fn == "ppo"
    for _ in range(int(rng.integers(1, 5))):
        n = int(rng.integers(1, 25))
        inputs = make_inputs(loss_fn, rng, n, per_token_clip=per_token_clip)
        tokens = random_tokens(rng, n)
        data.append(Datum(model_input=ModelInput.from_ints(tokens), loss_fn_inputs=inputs))
    return ForwardBackwardInput(data=data, loss_fn=loss_fn, loss_fn_config=config)


def reference_pass(
    model, fwd: ForwardBackwardInput
) -> tuple[float, list[np.ndarray], list[np.ndarray]]:
    """Summed loss (backpropagated into ``model``), per-datum logprobs and per-token losses."""
    cfg = {**DEFAULTS.get(fwd.loss_fn, {}), **(fwd.loss_fn_config or {})}
    total = torch.zeros((), dtype=torch.float64)
    logprobs, losses = [], []
    for datum in fwd.data:
        inp = {k: v.to_numpy().tolist() for k, v in datum.loss_fn_inputs.items()}
        tokens = datum.model_input.to_ints()
        p = token_logprobs(model, tokens, inp["target_tokens"])
        inp.setdefault("weights", [1.0] * len(tokens))
        terms = torch.stack(
            [reference_term(fwd.loss_fn, p[t], t, inp, cfg) for t in range(len(tokens))]
        )
        total = total + terms.sum()
        logprobs.append(p.detach().numpy())
        losses.append(terms.detach().numpy())
    if total.requires_grad:
        total.backward()
    return float(total.detach()), logprobs, losses


def assert_output_matches(out, ref: tuple[float, list[np.ndarray], list[np.ndarray]]) -> None:
    total, logprobs, losses = ref
    assert out.metrics["loss:sum"] == pytest.approx(total, rel=1e-5, abs=1e-5)
    for got, lp, ls in zip(out.loss_fn_outputs, logprobs, losses, strict=True):
        np.testing.assert_allclose(got["logprobs"].to_numpy(), lp, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got["elementwise_loss"].to_numpy(), ls, rtol=1e-5, atol=1e-5)


def adam_for(rng: np.random.Generator) -> AdamParams:
    return AdamParams(
        learning_rate=float(rng.choice([1e-3, 1e-2])),
        weight_decay=float(rng.choice([0.0, 0.1])),
        grad_clip_norm=float(rng.choice([0.0, 0.5])),
    )


def torch_adamw(params: dict[str, torch.nn.Parameter], adam: AdamParams) -> torch.optim.AdamW:
    return torch.optim.AdamW(
        list(params.values()),
        lr=adam.learning_rate,
        betas=(adam.beta1, adam.beta2),
        eps=adam.eps,
        weight_decay=adam.weight_decay,
        foreach=False,
    )


SMALL = {"max_batch_tokens": 48, "max_loaded_adapters": 3}


@pytest.mark.parametrize(
    ("seed", "overrides", "losses"),
    [
        (0, {}, LOSSES),
        # micro-batches of at most 48 padded tokens, and only 3 adapters resident at once:
        # a call runs in several passes and waves, spilling adapters with pending gradients
        (1, SMALL, LOSSES),
        (2, {}, ALL_LOSSES),
        (3, SMALL, ALL_LOSSES),
    ],
)
def test_training_together_equals_each_session_alone(make_host, seed, overrides, losses) -> None:
    rng = np.random.default_rng(seed)
    host = make_host(**overrides)
    every = losses is ALL_LOSSES
    sessions = random_sessions(host, rng, max(7, len(losses)), losses, each_loss=every)
    refs = {}
    for s in sessions:
        model, params = plain_peft_model(host, s["id"])
        s["adam"] = adam_for(rng)
        refs[s["id"]] = (model, params, torch_adamw(params, s["adam"]))
    for _step in range(2):
        # one session sends two requests in the same call: their gradients add up
        requests = [(s["id"], random_request(rng, s["loss_fn"], s["config"])) for s in sessions]
        requests.append(
            (sessions[0]["id"], random_request(rng, sessions[0]["loss_fn"], sessions[0]["config"]))
        )
        order = rng.permutation(len(requests))
        requests = [requests[i] for i in order]
        outputs = host.forward_backward_many(requests)
        for (model_id, fwd), out in zip(requests, outputs, strict=True):
            assert not isinstance(out, Exception), out
            assert_output_matches(out, reference_pass(refs[model_id][0], fwd))
        for s in sessions:
            assert_grads_close(host.pool.parameters(s["id"]), refs[s["id"]][1])
        # The reference optimizer steps on our gradients (checked just above): Adam divides by
        # the root of the second moment, which turns float32's rounding of a gradient 10^4 times
        # smaller than its tensor's largest into a visible share of a step; from the same
        # gradients, the two updates must agree to float32 rounding.
        ours_grads = {
            s["id"]: {n: q.grad.detach().double() for n, q in host.pool.parameters(s["id"]).items()}
            for s in sessions
        }
        steps = host.optim_step_many([(s["id"], s["adam"]) for s in sessions])
        for s, step in zip(sessions, steps, strict=True):
            _model, params, opt = refs[s["id"]]
            with torch.no_grad():
                for name, p in params.items():
                    p.grad.copy_(ours_grads[s["id"]][name])
            norm = torch.nn.utils.clip_grad_norm_(
                list(params.values()), s["adam"].grad_clip_norm or float("inf")
            )
            opt.step()
            opt.zero_grad(set_to_none=True)
            assert step.metrics["grad_norm:mean"] == pytest.approx(float(norm), rel=1e-5)
            ours = host.pool.parameters(s["id"])
            for name, p in params.items():
                torch.testing.assert_close(
                    ours[name].detach().double(), p.detach(), rtol=1e-5, atol=1e-5
                )
                assert ours[name].grad is None
                # The next step starts both from the same weights (the reference keeps its own
                # moments): float32 rounding in one step must not grow through the next.
                with torch.no_grad():
                    p.copy_(ours[name])


def test_forward_together_equals_each_alone_and_leaves_no_gradients(host) -> None:
    rng = np.random.default_rng(5)
    sessions = random_sessions(host, rng, len(ALL_LOSSES), ALL_LOSSES, each_loss=True)
    requests = [(s["id"], random_request(rng, s["loss_fn"], s["config"])) for s in sessions]
    requests.append((None, random_request(rng, "cross_entropy", None)))  # the base model
    outputs = host.forward_many(requests)
    for (model_id, fwd), out in zip(requests, outputs, strict=True):
        if model_id is None:
            model = plain_peft_model(host, sessions[0]["id"])[0]
            with model.disable_adapter(), torch.no_grad():
                ref = reference_pass(model, fwd)
        else:
            with torch.no_grad():
                ref = reference_pass(plain_peft_model(host, model_id)[0], fwd)
        assert_output_matches(out, ref)
    for s in sessions:
        assert not host.has_pending_gradients(s["id"])


def test_a_request_with_a_non_finite_loss_fails_alone(host) -> None:
    rng = np.random.default_rng(9)
    sessions = random_sessions(host, rng, 3)
    good = [(s["id"], random_request(rng, s["loss_fn"], s["config"])) for s in sessions[1:]]
    n = 6
    bad = ForwardBackwardInput(
        data=[
            Datum(
                model_input=ModelInput.from_ints(random_tokens(rng, n)),
                loss_fn_inputs={
                    "target_tokens": random_tokens(rng, n),
                    "logprobs": [-1e30] * n,  # exp(p - q) overflows
                    "advantages": [1.0] * n,
                },
            )
        ],
        loss_fn="importance_sampling",
    )
    outputs = host.forward_backward_many([good[0], (sessions[0]["id"], bad), good[1]])
    assert isinstance(outputs[1], InvalidInput) and outputs[1].field == "data[0]"
    assert not host.has_pending_gradients(sessions[0]["id"])
    for (model_id, fwd), out in zip(good, [outputs[0], outputs[2]], strict=True):
        model, params = plain_peft_model(host, model_id)
        assert_output_matches(out, reference_pass(model, fwd))
        assert_grads_close(host.pool.parameters(model_id), params)
    with pytest.raises(InvalidInput):
        host.forward_backward(sessions[0]["id"], bad)
