"""tinker-cookbook 0.6.1's ``recipes/rl_loop.py`` on its default loss (``stable_reinforce``), run by
the official tinker 0.38 SDK in its own environment (``.venv-tinker038``): the recipe's own
``Config`` and ``with_sampled_provenance``, its loop (a recorded sampling client per step, groups
of samples, rewards centred per group, padded datums with provenance, ``forward_backward`` and
``optim_step``), on the arithmetic problems of its ``math_rl`` recipe (``ArithmeticEnv``) instead
of GSM8K, so nothing is downloaded. Samples are seeded and requested one at a time, so two runs
on one machine are the same run.

``python rl_loop_arith.py <base_url> <model> <out.jsonl> <steps>``: one JSON line per step
(reward, the loss's metrics, a digest of the sampled tokens and their sequence ids), then one
with the model's logprobs of a fixed probe after the last step. The model id is the first line.
"""

from __future__ import annotations

import hashlib
import json
import sys

import numpy as np
import tinker
import torch
from tinker import types
from tinker.types.tensor_data import TensorData
from tinker_cookbook import renderers
from tinker_cookbook.recipes.math_rl.arithmetic_env import ArithmeticEnv
from tinker_cookbook.recipes.rl_loop import Config, with_sampled_provenance
from tinker_cookbook.tokenizer_utils import get_tokenizer

PROBLEMS, GROUP = 8, 4


def rewards_of(renderer, env: ArithmeticEnv, tokens_G_T: list[list[int]]) -> list[float]:
    """The arithmetic environment's reward (``ProblemEnv.step``): −0.1 without the stop
    sequence, +1 if the sum is right."""
    out = []
    for tokens in tokens_G_T:
        message, termination = renderer.parse_response(tokens)
        correct = env.check_answer(renderers.get_text_content(message))
        out.append(0.1 * (float(termination.is_stop_sequence) - 1.0) + float(correct))
    return out


def question(env: ArithmeticEnv) -> list:
    return [
        *ArithmeticEnv.standard_fewshot_prefix(),
        {"role": "user", "content": env.get_question()},
    ]


def datum_of(prompt: types.ModelInput, sampled: list[int], logprobs: list[float], advantage, sid):
    """rl_loop's datum for one sample, with its provenance (``with_sampled_provenance``)."""
    ob_len = prompt.length - 1
    model_input = prompt.append(types.EncodedTextChunk(tokens=sampled[:-1]))
    loss_fn_inputs = {
        "target_tokens": TensorData.from_torch(torch.tensor([0] * ob_len + sampled)),
        "logprobs": TensorData.from_torch(torch.tensor([0.0] * ob_len + logprobs)),
        "advantages": TensorData.from_torch(
            torch.tensor([0.0] * ob_len + [advantage] * (model_input.length - ob_len))
        ),
    }
    datum = types.Datum(model_input=model_input, loss_fn_inputs=loss_fn_inputs)
    return with_sampled_provenance(datum, prompt.length, len(sampled), sid)


def main(base_url: str, model: str, out_path: str, steps: int) -> None:
    config = Config(
        base_url=base_url, model_name=model, learning_rate=1e-3, lora_rank=8, max_tokens=8
    )
    assert config.loss_fn == "stable_reinforce", config.loss_fn  # the recipe's default
    renderer = renderers.get_renderer("role_colon", get_tokenizer(model))
    service = tinker.ServiceClient(base_url=config.base_url)
    training = service.create_lora_training_client(
        base_model=config.model_name, rank=config.lora_rank, seed=3
    ).result()
    adam = types.AdamParams(learning_rate=config.learning_rate, beta1=0.9, beta2=0.95, eps=1e-8)
    out = open(out_path, "w")  # noqa: SIM115 (one line per step, flushed as it goes)
    out.write(json.dumps({"model_id": training.model_id}) + "\n")
    out.flush()
    for step in range(steps):
        sampler = training.save_weights_and_get_sampling_client(
            record_stability_info=config.loss_fn == "stable_reinforce"
        ).result()
        rng = np.random.RandomState(step)
        problems = [
            ArithmeticEnv(*rng.randint(0, 101, 2), renderer=renderer) for _ in range(PROBLEMS)
        ]
        prompts, results = [], []
        for p, env in enumerate(problems):
            prompt = renderer.build_generation_prompt(question(env))
            params = types.SamplingParams(
                max_tokens=config.max_tokens,
                stop=renderer.get_stop_sequences(),
                seed=1000 * step + p,
            )
            prompts.append(prompt)
            # one request at a time (rl_loop sends them together): each is sampled in a pass of
            # its own, so two runs draw the same tokens with the same logprobs to the bit (a
            # pass shared with other requests agrees to about 1e-6, which can flip a draw)
            future = sampler.sample(prompt=prompt, num_samples=GROUP, sampling_params=params)
            results.append(future.result())
        datums, rewards, digest, ids = [], [], hashlib.sha256(), []
        for env, prompt, result in zip(problems, prompts, results, strict=True):
            sequences = result.sequences
            tokens_G_T = [s.tokens for s in sequences]
            rewards_G = rewards_of(renderer, env, tokens_G_T)
            rewards.append(sum(rewards_G) / len(rewards_G))
            digest.update(json.dumps(tokens_G_T).encode())
            ids += [s.sequence_id for s in sequences]
            mean = sum(rewards_G) / len(rewards_G)
            if all(r == mean for r in rewards_G):
                continue  # no signal in this group, as rl_loop skips it
            for s, r in zip(sequences, rewards_G, strict=True):
                datums.append(datum_of(prompt, s.tokens, s.logprobs, r - mean, s.sequence_id))
        line: dict = {
            "step": step,
            "reward": sum(rewards) / len(rewards),
            "tokens": digest.hexdigest(),
        }
        line["sequence_ids"] = len(set(ids))
        if datums:
            fwd_bwd = training.forward_backward(datums, loss_fn=config.loss_fn)
            optim = training.optim_step(adam)
            line["metrics"] = fwd_bwd.result().metrics
            optim.result()
        out.write(json.dumps(line) + "\n")
        out.flush()
    probe = renderer.build_generation_prompt(question(problems[0]))
    tokens = probe.to_ints()
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": TensorData.from_torch(torch.tensor(tokens[1:]))},
    )
    logprobs = training.forward([datum], "cross_entropy").result().loss_fn_outputs[0]["logprobs"]
    out.write(json.dumps({"probe": logprobs.tolist()}) + "\n")
    out.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
