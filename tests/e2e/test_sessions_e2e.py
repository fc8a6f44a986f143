"""The user's loop end to end: SDK → HTTP → control plane → broker → Celery worker → engine.

Runs on PostgreSQL + Redis (as deployed) and on the embedded default (SQLite + filesystem
broker), each with a real gunicorn server and a real worker process on the tiny model.
"""

from __future__ import annotations

import numpy as np
import pytest

from loopwright import NotFoundError, ServiceClient
from loopwright.types import AdamParams, Datum, ModelInput, SamplingParams

from .stack import TINY

pytestmark = pytest.mark.e2e

DIGITS = set("0123456789")


def reward(text: str, truth: int) -> float:
    """Answering with digits earns up to 0.5; the right sum earns 1 more."""
    digits = sum(ch in DIGITS for ch in text) / max(len(text), 1)
    return 0.5 * digits + (1.0 if text.strip() == str(truth) else 0.0)


def compute_advantages(rewards: list[float]) -> np.ndarray:
    r = np.array(rewards)
    return (r - r.mean()) / (r.std() + 1e-8)


def build_training_datum(prompt: list[int], seq, advantage: float) -> Datum:
    tokens = prompt + seq.tokens
    n_prompt = len(prompt) - 1
    return Datum(
        model_input=ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": tokens[1:],
            "logprobs": [0.0] * n_prompt + list(seq.logprobs),
            "advantages": [0.0] * n_prompt + [float(advantage)] * len(seq.tokens),
        },
    )


def test_grpo_loop_of_the_example_raises_reward(pg_stack) -> None:
    """The example loop, unchanged but for its import, model and data."""
    rng = np.random.default_rng(0)
    svc = ServiceClient(
        base_url=pg_stack.url,
        api_key=pg_stack.keys["alice"],
        role_arn=pg_stack.roles["alice"],
    )
    with svc:
        training_client = svc.create_lora_training_client(
            TINY, training_session_name="grpo-e2e", rank=8, alpha=16, seed=0
        )
        tokenizer = training_client.get_tokenizer()
        sampling_client = training_client.create_sampling_client()
        mean_rewards = []
        for step in range(10):
            datums, pending = [], []
            for i in range(4):
                a, b = (int(x) for x in rng.integers(0, 50, size=2))
                prompt = tokenizer.encode(f"{a}+{b}=", add_special_tokens=False)
                future = sampling_client.sample(
                    ModelInput.from_ints(prompt),
                    num_samples=8,
                    sampling_params=SamplingParams(
                        max_tokens=4, temperature=1.0, stop=[], seed=10 * step + i
                    ),
                )
                pending.append((prompt, a + b, future))
            step_rewards = []
            for prompt, truth, future in pending:
                result = future.result()
                rewards = [reward(tokenizer.decode(s.tokens), truth) for s in result.sequences]
                step_rewards += rewards
                advantages = compute_advantages(rewards)
                datums += [
                    build_training_datum(prompt, s, a)
                    for s, a in zip(result.sequences, advantages, strict=True)
                ]
            mean_rewards.append(float(np.mean(step_rewards)))
            fwd_bwd_op = training_client.forward_backward(datums, loss_fn="ppo")
            optim_op = training_client.optim_step(AdamParams(learning_rate=2e-2))
            fwd_bwd_op.result(), optim_op.result()
            sampling_client = training_client.save_weights_and_get_sampling_client()
        training_client.save_state().result()
    print("mean reward per step", mean_rewards)
    assert np.mean(mean_rewards[-3:]) > np.mean(mean_rewards[:3]) + 0.1, mean_rewards
    with ServiceClient(
        base_url=pg_stack.url, api_key=pg_stack.keys["alice"], role_arn=pg_stack.roles["alice"]
    ) as other:
        assert other.get_session(training_client.session_id).state in ("stopping", "stopped")


TEXTS = ["the cat sat on the mat.", "loopwright trains.", "2 + 2 = 4", "hello, world!"]


def sft_datums(tokenizer) -> list[Datum]:
    out = []
    for text in TEXTS:
        tokens = [
            tokenizer.bos_token_id,
            *tokenizer.encode(text, add_special_tokens=False),
            tokenizer.eos_token_id,
        ]
        out.append(
            Datum(
                model_input=ModelInput.from_ints(tokens[:-1]),
                loss_fn_inputs={
                    "target_tokens": tokens[1:],
                    "weights": [0.0] + [1.0] * (len(tokens) - 2),
                },
            )
        )
    return out


def test_sft_loop_then_resume_in_a_new_session_with_optimizer(pg_stack) -> None:
    with ServiceClient(
        base_url=pg_stack.url, api_key=pg_stack.keys["alice"], role_arn=pg_stack.roles["alice"]
    ) as svc:
        tc = svc.create_lora_training_client(TINY, rank=8, seed=1)
        data = sft_datums(tc.get_tokenizer())
        losses = []
        for _ in range(15):
            fb = tc.forward_backward(data, loss_fn="cross_entropy")
            tc.optim_step(AdamParams(learning_rate=3e-3))
            losses.append(fb.result().metrics["loss:sum"])
        assert losses[-1] < 0.6 * losses[0], losses
        path = tc.save_state("sft-15").result().path
        assert path.endswith("/weights/sft-15")
        adam = AdamParams(learning_rate=3e-3)
        continued = []
        for _ in range(2):
            continued.append(
                tc.forward_backward(data, loss_fn="cross_entropy").result().metrics["loss:sum"]
            )
            tc.optim_step(adam).result()

    with ServiceClient(
        base_url=pg_stack.url, api_key=pg_stack.keys["alice"], role_arn=pg_stack.roles["alice"]
    ) as svc2:
        resumed = svc2.create_training_client_from_state_with_optimizer(path)
        again = []
        for _ in range(2):
            again.append(
                resumed.forward_backward(data, loss_fn="cross_entropy").result().metrics["loss:sum"]
            )
            resumed.optim_step(adam).result()
        assert again == continued  # same state, same optimizer: the same numbers, bit for bit

        # another tenant cannot see or load any of it
        with (
            ServiceClient(
                base_url=pg_stack.url,
                api_key=pg_stack.keys["charlie"],
                role_arn=pg_stack.roles["charlie"],
            ) as charlie,
            pytest.raises(NotFoundError),
        ):
            charlie.create_training_client_from_state(path)


def test_a_second_script_attaches_to_a_live_model_and_continues_its_order(pg_stack) -> None:
    key, role = pg_stack.keys["alice"], pg_stack.roles["alice"]
    with ServiceClient(base_url=pg_stack.url, api_key=key, role_arn=role) as first:
        tc = first.create_lora_training_client(TINY, rank=4, seed=3)
        data = sft_datums(tc.get_tokenizer())
        adam = AdamParams(learning_rate=1e-3)
        tc.forward_backward(data, loss_fn="cross_entropy").result()
        tc.optim_step(adam).result()
        with ServiceClient(base_url=pg_stack.url, api_key=key) as second:
            attached = second.create_training_client(tc.model_id)
            assert attached.session_id == tc.session_id and attached.base_model == TINY
            # its requests take seq_ids 3 and 4: they run, in order, after the first two
            loss = attached.forward_backward(data, loss_fn="cross_entropy").result()
            attached.optim_step(adam).result()
            assert loss.metrics["loss:sum"] > 0
        info = first.get_session(tc.session_id)
        assert info.state == "active"
        with (
            ServiceClient(
                base_url=pg_stack.url,
                api_key=pg_stack.keys["charlie"],
                role_arn=pg_stack.roles["charlie"],
            ) as charlie,
            pytest.raises(NotFoundError),
        ):
            charlie.create_training_client(tc.model_id)


def test_embedded_default_smoke(embedded_stack) -> None:
    with ServiceClient(
        base_url=embedded_stack.url,
        api_key=embedded_stack.keys["alice"],
        role_arn=embedded_stack.roles["alice"],
    ) as svc:
        assert [m.name for m in svc.list_base_models()] == [TINY]
        tc = svc.create_lora_training_client(TINY, rank=4, seed=0)
        data = sft_datums(tc.get_tokenizer())
        first = tc.forward_backward(data, loss_fn="cross_entropy")
        step = tc.optim_step(AdamParams(learning_rate=1e-2))  # sent before the first finishes
        assert first.result().metrics["loss:sum"] > 0 and step.result().metrics
        sampler = tc.save_weights_and_get_sampling_client()
        res = sampler.sample(
            ModelInput.from_ints([104, 105]),
            num_samples=2,
            sampling_params=SamplingParams(max_tokens=5, stop=[]),
        ).result()
        assert [len(s.tokens) for s in res.sequences] == [5, 5]
        lps = sampler.compute_logprobs(ModelInput.from_ints([104, 105, 106])).result()
        assert lps[0] is None and len(lps) == 3
        assert tc.save_state("smoke").result().path.endswith("/weights/smoke")
