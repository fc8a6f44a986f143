"""Image classification on a vision-language base model: LoRA with cross_entropy on the label.

Each example is a generated image of a shape (``shape_images``) and the question "What shape is
this?"; the answer to learn is the shape's name. The held-out images are classified by scoring
every class name after the image with ``forward`` (no gradients): the likeliest name is the
prediction.

    python -m loopwright.cookbook.vision_classifier --steps 60
    python -m loopwright.cookbook.vision_classifier --classes circle,square --train-size 200

Needs Pillow: ``pip install 'loopwright[cookbook-vision]'``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from loopwright import ServiceClient, TrainingClient
from loopwright.types import (
    AdamParams,
    Datum,
    EncodedTextChunk,
    ImageChunk,
    ModelInput,
    ModelInputChunk,
)

from .checkpoint import (
    connect,
    finish_run,
    save_checkpoint,
    should_eval,
    should_save,
    start_training,
)
from .config import BaseConfig, opt, parse_config, save_config
from .metrics import MetricsLogger
from .renderers import RenderedConversation, Tokenizer, render_conversation
from .sft import batch_indices
from .shape_images import SHAPES, ShapeExample, pillow, shape_examples

RECIPE = "vision_classifier"
TINY_VLM = "loopwright/tiny-llava"


@dataclass
class Config(BaseConfig):
    model: str = opt(TINY_VLM, "vision-language base model to fine-tune")
    classes: str = opt(",".join(SHAPES), "comma-separated shapes to tell apart")
    prompt: str = opt("What shape is this?", "the question after the image")
    image_size: int = opt(32, "side of the generated images, in pixels")
    variation: float = opt(0.4, "0 to 1: how much position, size and colours vary")
    image_token: str = opt("<image>", "the token the chat template writes for an image")
    image_tokens: int = opt(0, "tokens per image; 0: ask the server (one compute_logprobs)")
    train_size: int = opt(300, "generated training images")
    eval_size: int = opt(60, "generated held-out images (other images than the training ones)")
    batch_size: int = opt(16, "images per step")
    learning_rate: float = opt(3e-3, "AdamW learning rate")
    steps: int = opt(60, "optimizer steps")
    eval_every: int = opt(10, "evaluate every N steps (and before the first and after the last)")


def class_names(config: Config) -> tuple[str, ...]:
    names = tuple(c.strip() for c in config.classes.split(",") if c.strip())
    unknown = [c for c in names if c not in SHAPES]
    if len(names) < 2 or unknown or len(set(names)) != len(names):
        raise SystemExit(
            f"--classes: two or more distinct shapes of {', '.join(SHAPES)}, got {config.classes!r}"
        )
    return names


def render_labels(
    tokenizer: Tokenizer, prompt: str, labels: Sequence[str]
) -> dict[str, RenderedConversation]:
    """Per label: the user turn (an image part, then ``prompt``) and the label as the assistant's
    answer, rendered with the model's chat template; weight only on the answer."""
    out = {}
    for label in labels:
        messages = [
            {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt}]},
            {"role": "assistant", "content": label},
        ]
        out[label] = render_conversation(tokenizer, messages, "last_assistant")  # type: ignore[arg-type]  # content parts
    return out


def image_datum(
    rendered: RenderedConversation,
    images: Sequence[bytes],
    image_token_id: int,
    tokens_per_image: int,
    scale: float = 1.0,
) -> Datum:
    """A cross_entropy datum from a rendering whose ``image_token_id`` tokens stand for
    ``images`` (PNG), in order: each becomes an image chunk of ``tokens_per_image`` positions
    with weight 0 (their targets are placeholders); text weights are multiplied by ``scale``."""
    placeholders = rendered.tokens.count(image_token_id)
    if placeholders != len(images):
        raise ValueError(f"the rendering holds {placeholders} images but {len(images)} were given")
    if rendered.tokens[-1] == image_token_id:
        raise ValueError("a rendering cannot end with an image: the last token is a target")
    chunks: list[ModelInputChunk] = []
    text: list[int] = []
    targets: list[int] = []
    weights: list[float] = []
    pending = iter(images)
    for token, weight in zip(rendered.tokens, rendered.weights, strict=True):
        if token == image_token_id:
            if text:
                chunks.append(EncodedTextChunk(tokens=text))
                text = []
            image = ImageChunk(data=next(pending), format="png", expected_tokens=tokens_per_image)
            chunks.append(image)
            targets += [0] * tokens_per_image
            weights += [0.0] * tokens_per_image
        else:
            text.append(token)
            targets.append(token)
            weights.append(weight * scale)
    if len(text) > 1:  # the last token is only a target
        chunks.append(EncodedTextChunk(tokens=text[:-1]))
    return Datum(
        model_input=ModelInput(chunks=chunks),
        loss_fn_inputs={"target_tokens": targets[1:], "weights": weights[1:]},
    )


def probe_image_tokens(service: ServiceClient, model: str, png: bytes) -> int:
    """How many positions the base model gives one image: the length of the logprobs of a
    prompt that is that image alone."""
    sampler = service.create_sampling_client(base_model=model)
    prompt = ModelInput(chunks=[ImageChunk(data=png, format="png")])
    return len(sampler.compute_logprobs(prompt).result())


def evaluate(
    client: TrainingClient,
    rendered: dict[str, RenderedConversation],
    held_out: Sequence[ShapeExample],
    image_token_id: int,
    tokens_per_image: int,
) -> dict[str, float]:
    """Accuracy of the likeliest class name (sum of its tokens' logprobs) after each held-out
    image, and the mean NLL per token of the right names; one ``forward`` for all."""
    labels = list(rendered)
    datums = [
        image_datum(rendered[label], [example.png], image_token_id, tokens_per_image)
        for example in held_out
        for label in labels
    ]
    outputs = client.forward(datums, "cross_entropy").result().loss_fn_outputs
    correct, nll, label_tokens = 0, 0.0, 0
    for index, example in enumerate(held_out):
        scores = {}
        for offset, label in enumerate(labels):
            datum = datums[index * len(labels) + offset]
            logprobs = outputs[index * len(labels) + offset]["logprobs"].tolist()
            weights = datum.loss_fn_inputs["weights"].tolist()
            scores[label] = sum(lp * w for lp, w in zip(logprobs, weights, strict=True))
            if label == example.label:
                nll -= scores[label]
                label_tokens += int(sum(weights))
        correct += max(scores, key=lambda name: scores[name]) == example.label
    return {"eval/accuracy": correct / len(held_out), "eval/loss": nll / max(label_tokens, 1)}


def main(config: Config) -> dict[str, float]:
    pillow()  # fail early, with the extra to install, when Pillow is missing
    classes = class_names(config)
    save_config(config, RECIPE)
    train = shape_examples(
        config.train_size, config.seed, classes, config.image_size, variation=config.variation
    )
    held_out = shape_examples(
        config.eval_size,
        config.seed,
        classes,
        config.image_size,
        split="held-out",
        variation=config.variation,
    )
    with connect(config) as service:
        client, resumed = start_training(service, config, RECIPE)
        start = resumed.step if resumed else 0
        tokenizer = client.get_tokenizer()
        image_token_id = tokenizer.convert_tokens_to_ids(config.image_token)
        rendered = render_labels(tokenizer, config.prompt, classes)
        if any(r.tokens.count(image_token_id) != 1 for r in rendered.values()):
            raise SystemExit(
                f"the chat template of {config.model} does not write an image part as "
                f"{config.image_token!r} (--image-token): is it a vision-language model?"
            )
        tokens_per_image = config.image_tokens or probe_image_tokens(
            service, config.model, train[0].png
        )
        print(
            f"{len(train)} training and {len(held_out)} held-out images of {', '.join(classes)}; "
            f"{tokens_per_image} tokens per image",
            file=sys.stderr,
        )
        first_eval: dict[str, float] = dict(resumed.extra.get("first_eval", {})) if resumed else {}
        last_eval: dict[str, float] = {}
        logger = MetricsLogger(
            config.log_dir,
            total_steps=config.steps,
            start_step=start,
            params=config.to_dict(),
            desc=RECIPE,
            summary_keys=("train/loss", "eval/accuracy"),
        )

        def run_eval(step: int) -> None:
            nonlocal first_eval, last_eval
            last_eval = evaluate(client, rendered, held_out, image_token_id, tokens_per_image)
            first_eval = first_eval or last_eval
            logger.log(step, last_eval, advance=False)

        with logger:
            for step in range(start, config.steps):
                if held_out and should_eval(config, step):
                    run_eval(step)
                started = time.monotonic()
                batch = [
                    train[i]
                    for i in batch_indices(step, config.batch_size, len(train), config.seed)
                ]
                trained = sum(rendered[e.label].trained_tokens for e in batch)
                datums = [
                    image_datum(
                        rendered[e.label], [e.png], image_token_id, tokens_per_image, 1 / trained
                    )
                    for e in batch
                ]
                # optim_step is sent before forward_backward finishes: the server keeps the order
                fwd_bwd = client.forward_backward(datums, "cross_entropy")
                optim = client.optim_step(AdamParams(learning_rate=config.learning_rate_at(step)))
                loss = fwd_bwd.result().metrics["loss:sum"]
                optim.result()
                logger.log(
                    step,
                    {
                        "train/loss": loss,
                        "train/tokens": trained,
                        "train/image_tokens": len(batch) * tokens_per_image,
                        "train/learning_rate": config.learning_rate_at(step),
                        "time/step_s": time.monotonic() - started,
                    },
                )
                if should_save(config, step + 1):
                    save_checkpoint(client, config.log_dir, step + 1, {"first_eval": first_eval})
            if held_out:
                run_eval(config.steps)
        return finish_run(client, config.log_dir, first_eval, last_eval)


if __name__ == "__main__":
    main(parse_config(Config, RECIPE, description=__doc__))
