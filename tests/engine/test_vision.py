"""The vision-language engine (the tiny LLaVA): images in training and sampling inputs, against
plain transformers + peft and the model's own processor; refusals of bad images."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from transformers import AutoModelForImageTextToText

from loopwright.types import (
    AdamParams,
    Datum,
    EncodedTextChunk,
    ForwardBackwardInput,
    ImageAssetPointerChunk,
    ImageChunk,
    ModelInput,
)
from workers.engine import tiny_vlm
from workers.engine.adapters import AdapterConfig
from workers.engine.catalog import TINY_MODEL, TINY_VLM, ModelCatalog
from workers.engine.errors import CheckpointError, InvalidInput
from workers.engine.host import HostConfig, ModelHost
from workers.engine.sampler import SampleJob

from .reference import assert_grads_close, randomize_adapter
from .vision_reference import (
    plain_vlm_peft,
    processed,
    random_targets,
    shape_png,
    vlm_logprobs,
)

TOL = {"rtol": 1e-5, "atol": 1e-5}
N_IMG = tiny_vlm.TOKENS_PER_IMAGE


@pytest.fixture(scope="module")
def vlm_catalog(tmp_path_factory: pytest.TempPathFactory) -> ModelCatalog:
    catalog = ModelCatalog(cache_dir=tmp_path_factory.mktemp("vlm-cache"))
    catalog.materialize(TINY_VLM)
    return catalog


@pytest.fixture
def vlm(vlm_catalog: ModelCatalog, tmp_path: Path) -> ModelHost:
    return ModelHost(TINY_VLM, HostConfig(spill_dir=tmp_path / "spill"), vlm_catalog)


def image_input(before: list[int], png: bytes, after: list[int], **extra) -> ModelInput:
    image = ImageChunk(data=png, format="png", **extra)
    return ModelInput(
        chunks=[EncodedTextChunk(tokens=before), image, EncodedTextChunk(tokens=after)]
    )


def test_the_catalog_builds_the_tiny_vlm_and_knows_a_vlm_folder(vlm_catalog, tmp_path) -> None:
    spec = vlm_catalog.spec(TINY_VLM)
    assert spec.vision and not vlm_catalog.spec(TINY_MODEL).vision
    folder = vlm_catalog.materialize(TINY_VLM).path
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "llava" and (folder / "processor_config.json").is_file()
    operator = ModelCatalog(cache_dir=tmp_path, folders={"acme/vlm": folder})
    assert operator.spec("acme/vlm").vision
    assert operator.spec("acme/vlm").context_length == tiny_vlm.TINY_VLM_CONTEXT_LENGTH


@pytest.mark.parametrize(
    ("loss_fn", "projector"),
    [("cross_entropy", False), ("importance_sampling", False), ("cross_entropy", True)],
)
def test_lora_gradients_with_images_match_plain_peft(
    vlm: ModelHost, loss_fn: str, projector: bool
) -> None:
    rng = np.random.default_rng(0)
    vlm.create_adapter("m", AdapterConfig(rank=4, alpha=16, seed=3, train_projector=projector))
    randomize_adapter(vlm, "m", seed=4)
    ref_model, ref_params = plain_vlm_peft(vlm, "m", projector=projector)
    assert set(vlm.pool.parameters("m")) == set(ref_params)  # the same layers, named here
    # the language model is adapted, the projector only when asked; the vision tower never
    assert not any("vision_tower" in n for n in ref_params)
    on_projector = [n for n in ref_params if ".multi_modal_projector." in n]
    assert len(on_projector) == (4 if projector else 0)  # linear_1 and linear_2: A and B
    assert all(
        ".language_model." in n or "lm_head" in n for n in set(ref_params) - set(on_projector)
    )
    pngs = [shape_png("circle", (200, 30, 30)), shape_png("square", (20, 30, 220), (33, 60))]
    data, reference = [], []
    total = torch.zeros((), dtype=torch.float64)
    for k, png in enumerate(pngs):
        before, after = [5, 6 + k], [40, 41, 42][: k + 1]
        ids, pixel_values = processed(vlm, before, png, after)
        targets = random_targets(rng, len(ids))
        inputs: dict = {"target_tokens": targets}
        if loss_fn == "cross_entropy":
            inputs["weights"] = rng.uniform(-0.5, 1.5, len(ids)).astype(np.float32).tolist()
        else:
            inputs["logprobs"] = rng.uniform(-6, -4, len(ids)).astype(np.float32).tolist()
            inputs["advantages"] = rng.normal(size=len(ids)).astype(np.float32).tolist()
        data.append(Datum(model_input=image_input(before, png, after), loss_fn_inputs=inputs))
        p = vlm_logprobs(ref_model, ids, targets, pixel_values)
        if loss_fn == "cross_entropy":
            loss = -(p * torch.tensor(inputs["weights"], dtype=torch.float64)).sum()
        else:
            r = torch.exp(p - torch.tensor(inputs["logprobs"], dtype=torch.float64))
            loss = -(r * torch.tensor(inputs["advantages"], dtype=torch.float64)).sum()
        total = total + loss
        reference.append(p.detach().numpy())
    total.backward()
    out = vlm.forward_backward("m", ForwardBackwardInput(data=data, loss_fn=loss_fn))
    for k, ref in enumerate(reference):
        np.testing.assert_allclose(out.loss_fn_outputs[k]["logprobs"].to_numpy(), ref, **TOL)
    assert out.metrics["loss:sum"] == pytest.approx(float(total.detach()), rel=1e-5)
    assert_grads_close(vlm.pool.parameters("m"), ref_params)
    if projector:  # the image reaches the loss through the projector's adapter
        grads = [vlm.pool.parameters("m")[n].grad for n in on_projector]
        assert all(g is not None and float(g.abs().sum()) > 0 for g in grads)


def test_projector_lora_gets_no_gradient_without_an_image_and_mixes_per_image(
    vlm: ModelHost,
) -> None:
    """A text-only input leaves the projector's adapter without gradient; a mixed pass of two
    adapters routes each image through the projector adapter of its own row."""
    vlm.create_adapter("a", AdapterConfig(rank=4, seed=1, train_projector=True))
    vlm.create_adapter("b", AdapterConfig(rank=4, seed=2, train_projector=True))
    randomize_adapter(vlm, "a", seed=5)
    randomize_adapter(vlm, "b", seed=6)
    text = Datum(
        model_input=ModelInput.from_ints([5, 6, 7, 8]),
        loss_fn_inputs={"target_tokens": [6, 7, 8, 9], "weights": [1.0] * 4},
    )
    vlm.forward_backward("a", ForwardBackwardInput(data=[text], loss_fn="cross_entropy"))
    for name, p in vlm.pool.parameters("a").items():
        untouched = p.grad is None or float(p.grad.abs().sum()) == 0
        assert untouched == (".multi_modal_projector." in name), name
    png = shape_png("circle", (10, 200, 10))
    n = 1 + N_IMG + 1
    d = Datum(
        model_input=image_input([3], png, [4]),
        loss_fn_inputs={"target_tokens": [7] * n, "weights": [1.0] * n},
    )
    # "a" sends a text row before its image: the batch's rows and its images differ in number
    fwd_a = ForwardBackwardInput(data=[text, d], loss_fn="cross_entropy")
    fwd_b = ForwardBackwardInput(data=[d], loss_fn="cross_entropy")
    alone = {
        "a": vlm.forward("a", fwd_a).loss_fn_outputs[1]["logprobs"].to_numpy(),
        "b": vlm.forward("b", fwd_b).loss_fn_outputs[0]["logprobs"].to_numpy(),
    }
    assert not np.allclose(alone["a"], alone["b"])
    mixed = vlm.forward_many([("a", fwd_a), ("b", fwd_b)])
    for m, out, k in zip("ab", mixed, (1, 0), strict=True):
        assert not isinstance(out, Exception)
        np.testing.assert_allclose(out.loss_fn_outputs[k]["logprobs"].to_numpy(), alone[m], **TOL)


def test_the_image_is_seen_and_text_only_inputs_still_work(vlm: ModelHost) -> None:
    vlm.create_adapter("m", AdapterConfig(rank=4, seed=1))
    targets = list(range(2 + N_IMG + 2))

    def logprobs(model_input: ModelInput) -> np.ndarray:
        d = Datum(model_input=model_input, loss_fn_inputs={"target_tokens": targets})
        out = vlm.forward("m", ForwardBackwardInput(data=[d], loss_fn="cross_entropy"))
        return out.loss_fn_outputs[0]["logprobs"].to_numpy()

    red = logprobs(image_input([1, 2], shape_png("circle", (250, 0, 0)), [3, 4]))
    blue = logprobs(image_input([1, 2], shape_png("circle", (0, 0, 250)), [3, 4]))
    assert np.allclose(red[:2], blue[:2])  # before the image: causal, unchanged
    assert np.abs(red[-2:] - blue[-2:]).max() > 1e-4  # after it: the image matters
    text = Datum(
        model_input=ModelInput.from_ints([7, 8, 9]), loss_fn_inputs={"target_tokens": [8, 9, 10]}
    )
    out = vlm.forward("m", ForwardBackwardInput(data=[text], loss_fn="cross_entropy"))
    assert out.loss_fn_outputs[0]["logprobs"].to_numpy().shape == (3,)


def test_sampled_logprobs_match_the_trainer_with_an_image(vlm: ModelHost) -> None:
    vlm.create_adapter("m", AdapterConfig(rank=4, seed=2))
    randomize_adapter(vlm, "m", seed=5)
    prompt = image_input([10, 11], shape_png("triangle", (0, 160, 0)), [12])
    job = SampleJob(prompt=[], prompt_input=prompt, num_samples=2, max_tokens=6, seed=7)
    job.prompt_logprobs = True
    vlm.sampler.validate(job)
    assert job.prompt == [10, 11, *[259] * N_IMG, 12] and job.pixels is not None
    (result,) = vlm.sample("m", [job])
    for seq in result.sequences:
        full = [*prompt.chunks, EncodedTextChunk(tokens=seq.tokens[:-1])]
        n = len(job.prompt) + len(seq.tokens) - 1
        targets = [*job.prompt[1:], *seq.tokens]
        d = Datum(model_input=ModelInput(chunks=full), loss_fn_inputs={"target_tokens": targets})
        out = vlm.forward("m", ForwardBackwardInput(data=[d], loss_fn="cross_entropy"))
        trainer = out.loss_fn_outputs[0]["logprobs"].to_numpy()
        assert trainer.shape == (n,)
        np.testing.assert_allclose(seq.logprobs, trainer[-len(seq.tokens) :], **TOL)
        prompt_lp = np.array(result.prompt.prompt_logprobs[1:], dtype=np.float32)
        np.testing.assert_allclose(prompt_lp, trainer[: len(job.prompt) - 1], **TOL)


def test_training_on_an_image_lowers_its_loss_and_checkpoints_round_trip(
    vlm: ModelHost, vlm_catalog: ModelCatalog, tmp_path: Path
) -> None:
    vlm.create_adapter("m", AdapterConfig(rank=8, seed=1))
    model_input = image_input([1], shape_png("square", (200, 200, 0)), [2, 3])
    n = 1 + N_IMG + 2
    weights = [0.0] * (n - 3) + [1.0] * 3
    d = Datum(
        model_input=model_input,
        loss_fn_inputs={"target_tokens": [0] * (n - 3) + [65, 66, 67], "weights": weights},
    )
    fwd = ForwardBackwardInput(data=[d], loss_fn="cross_entropy")
    first = vlm.forward_backward("m", fwd).metrics["loss:sum"]
    vlm.optim_step("m", AdamParams(learning_rate=0.02))
    for _ in range(4):
        vlm.forward_backward("m", fwd)
        vlm.optim_step("m", AdamParams(learning_rate=0.02))
    trained = vlm.forward("m", fwd)
    assert trained.metrics["loss:sum"] < first - 1.0
    vlm.save_state("m", tmp_path / "state")
    other = ModelHost(TINY_VLM, HostConfig(spill_dir=tmp_path / "spill2"), vlm_catalog)
    other.restore("m2", tmp_path / "state")
    again = other.forward("m2", fwd)
    np.testing.assert_allclose(
        again.loss_fn_outputs[0]["logprobs"].to_numpy(),
        trained.loss_fn_outputs[0]["logprobs"].to_numpy(),
        **TOL,
    )
    merged = vlm.export_merged("m", tmp_path / "merged")
    plain = AutoModelForImageTextToText.from_pretrained(merged, dtype=torch.float32)
    ids, pixel_values = processed(vlm, [1], shape_png("square", (200, 200, 0)), [2, 3])
    with torch.no_grad():
        ref = vlm_logprobs(plain, ids, d.loss_fn_inputs["target_tokens"].tolist(), pixel_values)
    np.testing.assert_allclose(
        trained.loss_fn_outputs[0]["logprobs"].to_numpy(), ref.numpy(), **TOL
    )


def png_of(image: Image.Image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, "PNG")
    return buf.getvalue()


def refusal(vlm: ModelHost, model_input: ModelInput) -> InvalidInput:
    d = Datum(model_input=model_input, loss_fn_inputs={"target_tokens": [0]})
    with pytest.raises(InvalidInput) as caught:
        vlm.datum_lengths(
            "m", ForwardBackwardInput(data=[d], loss_fn="cross_entropy"), backward=True
        )
    return caught.value


def test_bad_images_are_refused_naming_the_field(vlm: ModelHost) -> None:
    vlm.create_adapter("m", AdapterConfig(rank=4))
    png = shape_png("circle", (1, 2, 3))
    err = refusal(vlm, image_input([1], png, [2], expected_tokens=N_IMG + 1))
    assert err.field == "data[0].model_input.chunks[1].expected_tokens"
    assert str(N_IMG + 1) in err.message and str(N_IMG) in err.message
    err = refusal(vlm, image_input([1], b"\x89PNG\r\n\x1a\n not really", [2]))
    assert err.field == "data[0].model_input.chunks[1].data" and "not a valid png" in err.message
    jpeg = io.BytesIO()
    Image.new("RGB", (8, 8)).save(jpeg, "JPEG")
    err = refusal(vlm, image_input([1], jpeg.getvalue(), [2]))  # declared png
    assert "not a valid png" in err.message
    wide = png_of(Image.new("L", (9000, 1)))
    err = refusal(vlm, image_input([1], wide, [2]))
    assert err.field.endswith(".data") and "9000×1 pixels" in err.message
    err = refusal(vlm, ModelInput.from_ints([1, 259, 2]))
    assert err.field == "data[0].model_input.chunks[0].tokens" and "image token" in err.message
    pointer = ImageAssetPointerChunk(format="png", location="https://example.com/a.png")
    err = refusal(vlm, ModelInput(chunks=[pointer]))
    assert err.field == "data[0].model_input.chunks[0].type"
    big = ImageChunk(data=png, format="png", override_dimensions={"width": 9000, "height": 9})
    err = refusal(vlm, ModelInput(chunks=[big]))
    assert err.field == "data[0].model_input.chunks[0].override_dimensions"
    many = ModelInput(chunks=[ImageChunk(data=png, format="png")] * 17)
    assert "over the limit 16" in refusal(vlm, many).message


def test_a_text_model_refuses_images(make_host) -> None:
    host = make_host()
    host.create_adapter("m", AdapterConfig(rank=4))
    err = refusal(host, image_input([1], shape_png("circle", (1, 2, 3)), [2]))
    assert err.field == "data[0].model_input" and "encoded_text" in err.message
    job = SampleJob(prompt=[], prompt_input=image_input([1], b"x", [2]))
    with pytest.raises(InvalidInput, match="token chunks only"):
        host.sampler.validate(job)


def test_override_dimensions_resize_the_image_before_the_processor(vlm: ModelHost) -> None:
    """A 48×40 image sent with override_dimensions 20×80 reads as that image resized to 20×80
    and sent as is."""
    vlm.create_adapter("m", AdapterConfig(rank=4, seed=1))
    original = Image.open(io.BytesIO(shape_png("triangle", (9, 99, 199))))
    resized = png_of(original.convert("RGB").resize((20, 80), Image.Resampling.BICUBIC))
    targets = list(range(1 + N_IMG + 1))

    def logprobs(chunk: ImageChunk) -> np.ndarray:
        model_input = ModelInput(
            chunks=[EncodedTextChunk(tokens=[1]), chunk, EncodedTextChunk(tokens=[2])]
        )
        d = Datum(model_input=model_input, loss_fn_inputs={"target_tokens": targets})
        out = vlm.forward("m", ForwardBackwardInput(data=[d], loss_fn="cross_entropy"))
        return out.loss_fn_outputs[0]["logprobs"].to_numpy()

    dims = {"width": 20, "height": 80}
    overridden = logprobs(ImageChunk(data=png_of(original), format="png", override_dimensions=dims))
    np.testing.assert_allclose(overridden, logprobs(ImageChunk(data=resized, format="png")), **TOL)
    plain = logprobs(ImageChunk(data=png_of(original), format="png"))
    assert np.abs(plain - overridden).max() > 1e-5


def test_projector_adapter_checkpoints_round_trip_and_need_a_projector(
    vlm: ModelHost, vlm_catalog: ModelCatalog, make_host, tmp_path: Path
) -> None:
    vlm.create_adapter("m", AdapterConfig(rank=4, seed=1, train_projector=True))
    randomize_adapter(vlm, "m", seed=7)
    vlm.save_state("m", tmp_path / "state")
    saved = {k: v.detach().clone() for k, v in vlm.pool.state_dict("m").items()}
    assert any(".multi_modal_projector." in k for k in saved)
    other = ModelHost(TINY_VLM, HostConfig(spill_dir=tmp_path / "spill2"), vlm_catalog)
    other.restore("m2", tmp_path / "state")
    assert other.pool.config("m2").train_projector
    restored = other.pool.state_dict("m2")
    assert set(restored) == set(saved)
    for k, v in saved.items():
        torch.testing.assert_close(restored[k], v, rtol=0, atol=0)
    # the merged export carries the projector's adapter: plain transformers reads the same
    png = shape_png("square", (30, 30, 200))
    n = 1 + N_IMG + 2
    d = Datum(
        model_input=image_input([1], png, [2, 3]),
        loss_fn_inputs={"target_tokens": [9] * n, "weights": [1.0] * n},
    )
    ours = vlm.forward("m", ForwardBackwardInput(data=[d], loss_fn="cross_entropy"))
    unmerged = vlm.forward(None, ForwardBackwardInput(data=[d], loss_fn="cross_entropy"))
    plain = AutoModelForImageTextToText.from_pretrained(
        vlm.export_merged("m", tmp_path / "merged"), dtype=torch.float32
    )
    ids, pixel_values = processed(vlm, [1], png, [2, 3])
    with torch.no_grad():
        ref = vlm_logprobs(plain, ids, [9] * n, pixel_values).numpy()
    np.testing.assert_allclose(ours.loss_fn_outputs[0]["logprobs"].to_numpy(), ref, **TOL)
    assert not np.allclose(unmerged.loss_fn_outputs[0]["logprobs"].to_numpy(), ref, **TOL)
    # a model without the projector's adapter does not take these weights
    other.create_adapter("lm_only", AdapterConfig(rank=4, seed=1))
    with pytest.raises(CheckpointError, match="LoRA config"):
        other.load_state("lm_only", tmp_path / "state", optimizer=False)
    # a text model has no projector
    with pytest.raises(InvalidInput) as caught:
        make_host().create_adapter("t", AdapterConfig(rank=4, train_projector=True))
    assert caught.value.field == "lora_config.train_projector"


def test_sampling_several_projector_adapters_at_once_is_each_alone(vlm: ModelHost) -> None:
    """A continuous batch of two adapters' prompts (one text-only first, so its rows and its
    images differ) samples what each adapter alone would."""
    for m, seed in (("a", 1), ("b", 2)):
        vlm.create_adapter(m, AdapterConfig(rank=4, seed=seed, train_projector=True))
        randomize_adapter(vlm, m, seed=seed + 10)

    def jobs(m: str) -> list[SampleJob]:
        image = image_input([10, 11], shape_png("circle", (0, 90, 200)), [12])
        prompts = [ModelInput.from_ints([10, 11, 12]), image] if m == "a" else [image]
        out = []
        for k, prompt in enumerate(prompts):
            job = SampleJob(prompt=[], prompt_input=prompt, num_samples=1, max_tokens=4, seed=k)
            job.prompt_logprobs = True
            out.append(job)
        return out

    alone = {m: vlm.sample(m, jobs(m)) for m in "ab"}
    together = vlm.sample_many([("a", jobs("a")), ("b", jobs("b"))])
    for m, results in zip("ab", together, strict=True):
        assert not isinstance(results, Exception)
        for got, want in zip(results, alone[m], strict=True):
            assert got.sequences[0].tokens == want.sequences[0].tokens
            np.testing.assert_allclose(got.sequences[0].logprobs, want.sequences[0].logprobs, **TOL)
            np.testing.assert_allclose(
                np.array(got.prompt.prompt_logprobs[1:], dtype=np.float64),
                np.array(want.prompt.prompt_logprobs[1:], dtype=np.float64),
                **TOL,
            )
