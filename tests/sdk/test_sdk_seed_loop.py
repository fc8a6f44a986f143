"""The published example loop runs unchanged (but for model and data) against the fake server."""

from __future__ import annotations

import time

import numpy as np
import pytest
from fake_server import API_KEY, BASE_MODEL, FakeServer

from loopwright import ServiceClient
from loopwright.types import AdamParams, Datum, ModelInput, SamplingParams

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

PROMPTS = [("question : w1 w2", "42"), ("question : w3 w4", "w5")]
K = 3


def wait_until(condition: object, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.002)


def extract_answer(text: str) -> str | None:
    return text.split("####")[-1].strip() if "####" in text else None


def compute_reward(response_text: str, ground_truth: str) -> float:
    return 1.0 if extract_answer(response_text) == ground_truth else 0.0


def compute_advantages(rewards: list[float]) -> np.ndarray:
    array = np.array(rewards)
    return (array - array.mean()) / (array.std() + 1e-8)


def build_training_datum(prompt: list[int], sequence: object, advantage: float) -> Datum:
    tokens = prompt + list(sequence.tokens)  # type: ignore[attr-defined]
    n_prompt = len(prompt) - 1
    n_completion = len(sequence.tokens)  # type: ignore[attr-defined]
    return Datum(
        model_input=ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": tokens[1:],
            "logprobs": [0.0] * n_prompt + list(sequence.logprobs),  # type: ignore[attr-defined]
            "advantages": [0.0] * n_prompt + [float(advantage)] * n_completion,
        },
    )


def test_the_example_loop(server: FakeServer) -> None:
    svc = ServiceClient(api_key=API_KEY, transport=server.transport, role_arn="arn:role/x")
    try:
        names = [m.name for m in svc.list_base_models()]
        training_client = svc.create_lora_training_client(
            names[0],
            training_session_name="grpo-demo",
            rank=32,
            alpha=64,
            model_package_group_arn="arn:mpg/demo",
            s3_output_path="s3://bucket/out",
        )
        tokenizer = training_client.get_tokenizer()
        sampling_client = training_client.create_sampling_client()
        for _step in range(2):
            datums, pending = [], []
            for question, ground_truth in PROMPTS:
                prompt = tokenizer.encode(question, add_special_tokens=False)
                pending.append(
                    (
                        prompt,
                        ground_truth,
                        sampling_client.sample(
                            prompt,
                            num_samples=K,
                            sampling_params=SamplingParams(
                                max_tokens=5, temperature=0.7, top_p=0.9
                            ),
                        ),
                    )
                )
            for prompt, ground_truth, future in pending:
                result = future.result()
                rewards = [
                    compute_reward(tokenizer.decode(s.tokens), ground_truth)
                    for s in result.sequences
                ]
                advantages = compute_advantages(rewards)
                datums += [
                    build_training_datum(prompt, s, a)
                    for s, a in zip(result.sequences, advantages, strict=True)
                ]
            fwd_bwd_op = training_client.forward_backward(datums, loss_fn="ppo")
            optim_op = training_client.optim_step(AdamParams(learning_rate=1e-5))
            fwd_bwd_op.result(), optim_op.result()
            sampling_client = training_client.save_weights_and_get_sampling_client()

        merged = training_client.save_weights_for_sampler(merge_weights=True).result()
        state = training_client.save_state().result()
        training_client.stop()
    finally:
        svc.close()

    session = server.sessions[training_client.session_id]
    assert session["name"] == "grpo-demo"
    assert session["role_arn"] == "arn:role/x"
    assert session["model_package_group_arn"] == "arn:mpg/demo"
    assert session["s3_output_path"] == "s3://bucket/out"
    assert session["state"] == "stopped"
    model = server.models[training_client.model_id]
    assert model.lora["alpha"] == 64 and model.lora["rank"] == 32
    assert model.steps == 2
    kinds = [kind for _, kind in model.executed]
    assert kinds == ["forward_backward", "optim_step", "save_weights_for_sampler"] * 2 + [
        "save_weights_for_sampler",
        "save_weights",
    ]
    # seq_ids start at 1, are contiguous in call order, and ran in that order
    assert [seq for seq, _ in model.executed] == list(range(1, 9))
    assert sorted(model.arrivals) == list(range(1, 9))
    assert merged.path == f"tinker://{model.model_id}/sampler_weights/sampler-000007"
    assert server.checkpoints[merged.path]["merge_weights"] is True
    assert state.path == f"tinker://{model.model_id}/weights/state-000008"
    # the first sampler reads the live model; each refresh is an ephemeral save
    assert server.calls("create_sampling_session")[0]["model_id"] == model.model_id
    ephemeral = [b for b in server.calls("save_weights_for_sampler") if "path" not in b]
    assert [b["sampling_session_seq_id"] for b in ephemeral] == [1, 2]


def test_samples_are_all_in_flight_before_any_is_awaited(
    server: FakeServer, service: ServiceClient
) -> None:
    sampler = service.create_sampling_client(base_model=BASE_MODEL)
    server.hold = True
    futures = [sampler.sample([1, 2, 3], num_samples=2) for _ in range(50)]
    wait_until(lambda: len(server.calls("asample")) == 50)
    assert not any(f.done() for f in futures)
    server.hold = False
    results = [f.result(timeout=10) for f in futures]
    # each future got its own request's answer: the fake derives tokens from the seq_id
    seq_ids = [b["seq_id"] for b in server.calls("asample")]
    assert sorted(seq_ids) == list(range(1, 51))
    for seq_id, result in zip(range(1, 51), results, strict=True):
        assert len(result.sequences) == 2
        assert result.sequences[0].tokens[0] == (seq_id * 7) % 50 + 1


def test_optim_step_is_sent_before_forward_backward_finishes(
    server: FakeServer, service: ServiceClient
) -> None:
    client = service.create_lora_training_client(BASE_MODEL, rank=4)
    datum = Datum(
        model_input=ModelInput.from_ints([1, 2, 3]),
        loss_fn_inputs={"target_tokens": [2, 3, 4], "weights": [1.0, 1.0, 1.0]},
    )
    server.hold = True
    fwd_bwd = client.forward_backward([datum], "cross_entropy")
    optim = client.optim_step(AdamParams(learning_rate=1e-4))
    wait_until(lambda: len(server.calls("optim_step")) == 1)
    assert len(server.calls("forward_backward")) == 1
    assert not fwd_bwd.done() and not optim.done()
    server.hold = False
    assert optim.result(timeout=10).metrics == {"learning_rate:mean": 1e-4}
    assert fwd_bwd.result(timeout=10).metrics["loss:sum"] == pytest.approx(0.3 + 0.4 + 0.5)
    assert server.models[client.model_id].executed == [(1, "forward_backward"), (2, "optim_step")]
