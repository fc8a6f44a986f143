"""Supervised fine-tuning on chat conversations: cross_entropy on the assistant turns only,
with a held-out split scored by ``forward`` (no gradients).

    python -m loopwright.cookbook.sft --steps 40            # the shipped chat_sft.jsonl
    python -m loopwright.cookbook.sft --data my_chats.jsonl  # any {"messages": [...]} JSONL
"""

from __future__ import annotations

import random
import sys
import time
from dataclasses import dataclass
from typing import Any

from loopwright import SamplingClient, TrainingClient
from loopwright.types import AdamParams, Datum, SamplingParams

from .checkpoint import (
    connect,
    finish_run,
    save_checkpoint,
    should_eval,
    should_save,
    start_training,
)
from .config import BaseConfig, opt, parse_config, save_config
from .datagen import data_path, read_jsonl
from .datums import sft_datums
from .math_tasks import extract_answer, math_reward
from .metrics import MetricsLogger
from .renderers import (
    Message,
    RenderedConversation,
    Tokenizer,
    decode,
    render_conversation,
    render_prompt,
    train_on_mode,
)

RECIPE = "sft"


@dataclass
class Config(BaseConfig):
    data: str = opt("chat_sft.jsonl", "JSONL of {'messages': [...]}: a shipped name or a path")
    eval_fraction: float = opt(0.1, "share of conversations held out")
    eval_max: int = opt(64, "most held-out conversations scored per evaluation")
    eval_generate: int = opt(32, "held-out questions answered greedily ('####' answers only)")
    batch_size: int = opt(16, "conversations per step")
    max_length: int = opt(512, "longer conversations (in tokens) are skipped")
    train_on: str = opt("assistant", "assistant, last_assistant or all")
    learning_rate: float = opt(5e-4, "AdamW learning rate")
    steps: int = opt(40, "optimizer steps")


def load_conversations(path: str) -> list[list[Message]]:
    """The ``messages`` of every record of a JSONL file."""
    records = read_jsonl(data_path(path))
    conversations = []
    for index, record in enumerate(records):
        messages = record.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ValueError(f"{path}: record {index} has no 'messages' list")
        conversations.append([{"role": m["role"], "content": m["content"]} for m in messages])
    return conversations


def split(items: list[Any], fraction: float, seed: int) -> tuple[list[Any], list[Any]]:
    """(train, held out): a seeded shuffle, then the first ``fraction`` held out."""
    order = list(range(len(items)))
    random.Random(f"split:{seed}").shuffle(order)
    n_eval = max(1, round(len(items) * fraction)) if fraction > 0 else 0
    return [items[i] for i in order[n_eval:]], [items[i] for i in order[:n_eval]]


def batch_indices(step: int, batch_size: int, n: int, seed: int) -> list[int]:
    """The examples of ``step``: consecutive slices of a fresh seeded shuffle each epoch."""
    orders: dict[int, list[int]] = {}
    out = []
    for position in range(step * batch_size, (step + 1) * batch_size):
        epoch, offset = divmod(position, n)
        if epoch not in orders:
            orders[epoch] = list(range(n))
            random.Random(f"epoch:{seed}:{epoch}").shuffle(orders[epoch])
        out.append(orders[epoch][offset])
    return out


def held_out_loss(client: TrainingClient, rendered: list[RenderedConversation]) -> float:
    """Mean NLL per trained token of the held-out conversations (one forward, no gradients)."""
    datums: list[Datum] = sft_datums([(r.tokens, r.weights) for r in rendered])
    return float(client.forward(datums, "cross_entropy").result().metrics["loss:sum"])


def held_out_accuracy(
    sampler: SamplingClient, tokenizer: Tokenizer, conversations: list[list[Message]]
) -> float | None:
    """Exact-answer accuracy on held-out conversations whose last answer ends in '#### N'."""
    asks = []
    for messages in conversations:
        answer = (
            extract_answer(messages[-1]["content"]) if messages[-1]["role"] == "assistant" else None
        )
        if answer is not None:
            prompt = render_prompt(tokenizer, messages[:-1])
            params = SamplingParams(max_tokens=48, temperature=0.0)
            asks.append((answer, sampler.sample(prompt, num_samples=1, sampling_params=params)))
    if not asks:
        return None
    correct = sum(
        math_reward(decode(tokenizer, f.result().sequences[0].tokens), a) for a, f in asks
    )
    return correct / len(asks)


def evaluate(
    client: TrainingClient,
    tokenizer: Tokenizer,
    rendered: list[RenderedConversation],
    conversations: list[list[Message]],
    config: Config,
) -> dict[str, float]:
    metrics = {"eval/loss": held_out_loss(client, rendered)}
    if config.eval_generate > 0:
        sampler = client.save_weights_and_get_sampling_client()
        accuracy = held_out_accuracy(sampler, tokenizer, conversations[: config.eval_generate])
        if accuracy is not None:
            metrics["eval/answer_accuracy"] = accuracy
    return metrics


def main(config: Config) -> dict[str, float]:
    train_on = train_on_mode(config.train_on)
    save_config(config, RECIPE)
    train_convs, eval_convs = split(
        load_conversations(config.data), config.eval_fraction, config.seed
    )
    with connect(config) as service:
        client, resumed = start_training(service, config, RECIPE)
        start = resumed.step if resumed else 0
        tokenizer = client.get_tokenizer()

        def render(convs: list[list[Message]]) -> list[RenderedConversation]:
            out = [render_conversation(tokenizer, m, train_on) for m in convs]
            return [r for r in out if len(r.tokens) <= config.max_length and r.trained_tokens]

        train = render(train_convs)
        eval_subset = eval_convs[: config.eval_max]
        eval_rendered = render(eval_subset)
        print(
            f"{len(train)} training and {len(eval_rendered)} held-out conversations",
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
            summary_keys=("train/loss", "eval/loss"),
        )
        with logger:
            for step in range(start, config.steps):
                if eval_rendered and should_eval(config, step):
                    last_eval = evaluate(client, tokenizer, eval_rendered, eval_subset, config)
                    first_eval = first_eval or last_eval
                    logger.log(step, last_eval, advance=False)
                started = time.monotonic()
                batch = [
                    train[i]
                    for i in batch_indices(step, config.batch_size, len(train), config.seed)
                ]
                datums = sft_datums([(r.tokens, r.weights) for r in batch])
                # optim_step is sent before forward_backward finishes: the server keeps the order
                fwd_bwd = client.forward_backward(datums, "cross_entropy")
                optim = client.optim_step(AdamParams(learning_rate=config.learning_rate_at(step)))
                loss = fwd_bwd.result().metrics["loss:sum"]
                optim.result()
                logger.log(
                    step,
                    {
                        "train/loss": loss,
                        "train/tokens": sum(r.trained_tokens for r in batch),
                        "train/learning_rate": config.learning_rate_at(step),
                        "time/step_s": time.monotonic() - started,
                    },
                )
                if should_save(config, step + 1):
                    save_checkpoint(client, config.log_dir, step + 1, {"first_eval": first_eval})
            if eval_rendered:
                last_eval = evaluate(client, tokenizer, eval_rendered, eval_subset, config)
                logger.log(config.steps, last_eval, advance=False)
        return finish_run(client, config.log_dir, first_eval, last_eval)


if __name__ == "__main__":
    main(parse_config(Config, RECIPE, description=__doc__))
