"""Images through the whole stack: the loopwright SDK, the control plane's checks on arrival,
and a real worker process serving the tiny vision-language model."""

from __future__ import annotations

import base64
import gc
import io
import math
import time

import httpx
import pytest
from PIL import Image, ImageDraw

from loopwright import ServiceClient
from loopwright.errors import BadRequestError, NotFoundError
from loopwright.types import (
    AdamParams,
    Datum,
    EncodedTextChunk,
    ImageChunk,
    ModelInput,
    SamplingParams,
)

from .stack import Stack

pytestmark = pytest.mark.e2e

TINY_VLM = "loopwright/tiny-llava"
PER_IMAGE = 16  # the tiny LLaVA's image tokens per image


@pytest.fixture(scope="module")
def vlm_stack(tmp_path_factory):
    stack = Stack(
        "postgres-redis",
        tmp_path_factory.mktemp("vlm"),
        workers={"vlm-worker": ["--base-model", TINY_VLM]},
        ready_model=TINY_VLM,
    ).start()
    try:
        yield stack
    finally:
        stack.stop()


def png(colour: tuple[int, int, int], size: tuple[int, int] = (40, 30)) -> bytes:
    image = Image.new("RGB", size, (255, 255, 255))
    ImageDraw.Draw(image).ellipse((4, 4, size[0] - 4, size[1] - 4), fill=colour)
    buf = io.BytesIO()
    image.save(buf, "PNG")
    return buf.getvalue()


def with_image(before: list[int], data: bytes, after: list[int], **image) -> ModelInput:
    image.setdefault("expected_tokens", PER_IMAGE)
    return ModelInput(
        chunks=[
            EncodedTextChunk(tokens=before),
            ImageChunk(data=data, format=image.pop("format", "png"), **image),
            EncodedTextChunk(tokens=after),
        ]
    )


def datum(model_input: ModelInput, n: int) -> Datum:
    targets = [0] * (n - 2) + [65, 66]
    weights = [0.0] * (n - 2) + [1.0, 1.0]
    return Datum(
        model_input=model_input, loss_fn_inputs={"target_tokens": targets, "weights": weights}
    )


def test_train_and_sample_on_images_through_a_vlm_worker(vlm_stack) -> None:
    alice = vlm_stack.keys["alice"]
    with ServiceClient(
        base_url=vlm_stack.url, api_key=alice, role_arn=vlm_stack.roles["alice"]
    ) as sc:
        trainer = sc.create_lora_training_client(TINY_VLM, rank=4, seed=3)
        n = 2 + PER_IMAGE + 2
        data = [datum(with_image([1, 2], png((200, 0, 0)), [3, 4]), n)]
        first = trainer.forward_backward(data, loss_fn="cross_entropy").result(timeout=120)
        assert len(first.loss_fn_outputs[0]["logprobs"].tolist()) == n
        assert math.isfinite(first.metrics["loss:sum"])
        for _ in range(3):
            trainer.optim_step(AdamParams(learning_rate=0.05)).result(timeout=120)
            trainer.forward_backward(data, loss_fn="cross_entropy").result(timeout=120)
        after = trainer.forward(data, loss_fn="cross_entropy").result(timeout=120)
        assert after.metrics["loss:sum"] < first.metrics["loss:sum"]

        sampler = trainer.save_weights_and_get_sampling_client()
        prompt = with_image([1, 2], png((0, 0, 200)), [3])
        out = sampler.sample(
            prompt, num_samples=2, sampling_params=SamplingParams(max_tokens=4, seed=1)
        ).result(timeout=120)
        assert [len(s.tokens) for s in out.sequences] == [4, 4]
        logprobs = sampler.compute_logprobs(prompt).result(timeout=120)
        assert len(logprobs) == 2 + PER_IMAGE + 1 and logprobs[0] is None

        # refusals on arrival: 400 naming the field
        wrong = [datum(with_image([1], png((1, 2, 3)), [2], expected_tokens=7), 1 + 7 + 1)]
        with pytest.raises(BadRequestError) as caught:
            trainer.forward_backward(wrong, loss_fn="cross_entropy").result(timeout=60)
        assert caught.value.status_code == 400
        assert "expected_tokens" in str(caught.value) and "7" in str(caught.value)
        assert str(PER_IMAGE) in str(caught.value)
        bad = [datum(with_image([1], b"\x89PNG\r\n\x1a\nbroken", [2]), 1 + PER_IMAGE + 1)]
        with pytest.raises(BadRequestError, match="not a valid png"):
            trainer.forward_backward(bad, loss_fn="cross_entropy").result(timeout=60)
        buf = io.BytesIO()
        Image.new("L", (9000, 2)).save(buf, "PNG")  # a few hundred bytes, too wide
        huge = buf.getvalue()
        with pytest.raises(BadRequestError, match="9000×2 pixels"):
            sampler.sample(with_image([1], huge, [2]), num_samples=1).result(timeout=60)

        # image tokens are their own meter: 4 forward_backward + 1 forward + 2 prompts, one
        # image each; the text meters count the rest
        want = {"image_tokens": 7 * PER_IMAGE, "train_tokens": 4 * 4, "forward_tokens": 4}
        deadline = time.monotonic() + 60
        while True:
            r = httpx.get(
                f"{vlm_stack.url}/api/v1/sessions/{trainer.session_id}/usage",
                headers={"X-API-Key": alice},
                timeout=30,
            )
            assert r.status_code == 200, r.text
            metered = {line["meter"]: line["quantity"] for line in r.json()["lines"]}
            if all(metered.get(k) == v for k, v in want.items()) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert {k: metered.get(k) for k in want} == want, r.json()
        assert metered["prefill_tokens"] == 2 * 3

    charlie = vlm_stack.keys["charlie"]
    with (
        ServiceClient(base_url=vlm_stack.url, api_key=charlie) as other,
        pytest.raises(NotFoundError),
    ):
        other.create_training_client(trainer.model_id).forward_backward(
            data, loss_fn="cross_entropy"
        ).result(timeout=60)


@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_the_official_tinker_sdk_sends_images(vlm_stack, monkeypatch) -> None:
    """tinker 0.24.1's own ImageChunk, JSON on the wire, trains and samples on the tiny VLM."""
    tinker = pytest.importorskip("tinker")
    from tinker import types

    monkeypatch.setenv("TINKER_API_KEY", vlm_stack.role_key("alice"))
    service = tinker.ServiceClient(base_url=vlm_stack.url)
    tc = service.create_lora_training_client(base_model=TINY_VLM, rank=4)
    image = types.ImageChunk(data=png((9, 200, 9)), format="png", expected_tokens=PER_IMAGE)
    prompt = types.ModelInput(
        chunks=[types.EncodedTextChunk(tokens=[1, 2]), image, types.EncodedTextChunk(tokens=[3])]
    )
    n = 2 + PER_IMAGE + 1
    d = types.Datum(
        model_input=prompt,
        loss_fn_inputs={"target_tokens": [0] * (n - 1) + [65], "weights": [0.0] * (n - 1) + [1.0]},
    )
    out = tc.forward_backward([d], "cross_entropy").result()
    assert len(out.loss_fn_outputs[0]["logprobs"].tolist()) == n
    tc.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    sampler = tc.save_weights_and_get_sampling_client()
    res = sampler.sample(
        prompt=prompt, num_samples=1, sampling_params=types.SamplingParams(max_tokens=3, seed=2)
    ).result()
    assert len(res.sequences[0].tokens) == 3
    wrong = types.ModelInput(
        chunks=[types.ImageChunk(data=png((1, 1, 1)), format="png", expected_tokens=5)]
    )
    with pytest.raises(tinker.BadRequestError, match="expected_tokens"):
        sampler.sample(
            prompt=wrong, num_samples=1, sampling_params=types.SamplingParams(max_tokens=1)
        ).result()
    gc.collect()


def test_chat_completions_take_data_uri_images(vlm_stack) -> None:
    """``image_url`` content parts with a data: URI reach the tiny VLM; a remote URL is a 400
    naming the part, and another tenant cannot use alice's model."""
    alice = vlm_stack.keys["alice"]
    uri = "data:image/png;base64," + base64.b64encode(png((50, 60, 70))).decode()

    def chat(key: str, name: str, url: str) -> httpx.Response:
        content = [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": url}},
        ]
        body = {"model": name, "messages": [{"role": "user", "content": content}]}
        return httpx.post(
            f"{vlm_stack.url}/v1/chat/completions",
            json={**body, "max_tokens": 3, "seed": 1},
            headers={"Authorization": f"Bearer {key}"},
            timeout=120,
        )

    role = vlm_stack.roles["alice"]
    with ServiceClient(base_url=vlm_stack.url, api_key=alice, role_arn=role) as sc:
        trainer = sc.create_lora_training_client(TINY_VLM, rank=4, seed=3)
        name = trainer.save_weights_for_sampler("chat").result(timeout=120).path
        r = chat(alice, name, uri)
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["finish_reason"] in ("length", "stop")
        r = chat(alice, name, "https://example.com/cat.png")
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == "messages[0].content[1].image_url.url"
        assert chat(vlm_stack.keys["charlie"], name, uri).status_code == 404


def test_a_recorded_image_sample_trains_stable_reinforce(vlm_stack) -> None:
    """A sampler recording its samples on an image prompt; stable_reinforce cites the sequences
    (the same image: trained; another image at its positions: 400 naming the run); charlie's
    model citing them gets the 404 of an unknown sequence."""
    from loopwright.types import PromptProvenanceSpan, SampledProvenanceSpan

    red, blue = png((200, 0, 0)), png((0, 0, 200))
    prompt_length = 2 + PER_IMAGE + 1

    def cited(image: bytes, seq) -> Datum:
        sampled = list(seq.tokens)
        ob = prompt_length - 1
        return Datum(
            model_input=with_image([1, 2], image, [3, *sampled[:-1]]),
            loss_fn_inputs={
                "target_tokens": [0] * ob + sampled,
                "logprobs": [0.0] * ob + [-9.0] * len(sampled),
                "advantages": [0.0] * ob + [1.0] * len(sampled),
            },
        ).with_provenance(
            model_input=[
                PromptProvenanceSpan(sequence_id=seq.sequence_id, length=prompt_length),
                SampledProvenanceSpan(sequence_id=seq.sequence_id, length=len(sampled) - 1),
            ],
            loss_fn_inputs=[
                PromptProvenanceSpan(sequence_id=seq.sequence_id, offset=1, length=ob),
                SampledProvenanceSpan(sequence_id=seq.sequence_id, length=len(sampled)),
            ],
        )

    alice = vlm_stack.keys["alice"]
    role = vlm_stack.roles["alice"]
    with ServiceClient(base_url=vlm_stack.url, api_key=alice, role_arn=role) as sc:
        trainer = sc.create_lora_training_client(TINY_VLM, rank=4, seed=3)
        sampler = trainer.save_weights_and_get_sampling_client(record_stability_info=True)
        out = sampler.sample(
            with_image([1, 2], red, [3]),
            num_samples=2,
            sampling_params=SamplingParams(max_tokens=4, seed=1),
        ).result(timeout=120)
        seqs = out.sequences
        assert all(s.sequence_id for s in seqs)
        done = trainer.forward_backward(
            [cited(red, s) for s in seqs], loss_fn="stable_reinforce"
        ).result(timeout=120)
        assert math.isfinite(done.metrics["loss:sum"])
        with pytest.raises(BadRequestError, match="the image sent is not the recorded image"):
            trainer.forward_backward(
                [cited(red, seqs[0]), cited(blue, seqs[1])], loss_fn="stable_reinforce"
            ).result(timeout=60)

    charlie = vlm_stack.keys["charlie"]
    with ServiceClient(
        base_url=vlm_stack.url, api_key=charlie, role_arn=vlm_stack.roles["charlie"]
    ) as other:
        theirs = other.create_lora_training_client(TINY_VLM, rank=4, seed=3)
        with pytest.raises(NotFoundError, match="not a recorded sequence"):
            theirs.forward_backward([cited(red, seqs[0])], loss_fn="stable_reinforce").result(
                timeout=60
            )
