"""Scenarios the official tinker SDK runs against a live server, in a process of its own.

Run as ``python tinker_scenarios.py BASE_URL`` by the interpreter of a virtualenv that has one
tinker release installed (0.24.1 in ``.venv``, 0.38.0 in ``.venv-tinker038``); the API key is
``TINKER_API_KEY``. It imports nothing from this repository and prints one JSON object: what
each scenario saw, for the tests to check against references of their own.
"""

from __future__ import annotations

import json
import sys
import warnings

import numpy as np
import tinker
from tinker import types

TINY = "loopwright/tiny-byte-llama"
VERSION = tuple(int(p) for p in tinker.__version__.split(".")[:2])


def done(value):
    """A future's value (0.38 returns futures from most calls; 0.24 mostly values)."""
    return value.result() if hasattr(value, "result") else value


def datums(rng: np.random.Generator, n: int, length: int) -> list:
    out = []
    for _ in range(n):
        tokens = rng.integers(0, 256, size=length + 1).tolist()
        out.append(
            types.Datum(
                model_input=types.ModelInput.from_ints(tokens[:-1]),
                loss_fn_inputs={
                    "target_tokens": tokens[1:],
                    "weights": rng.uniform(-0.5, 1.5, size=length).astype(np.float32).tolist(),
                    "advantages": rng.normal(size=length).astype(np.float32).tolist(),
                    "logprobs": (-rng.uniform(4.0, 7.0, size=length)).astype(np.float32).tolist(),
                },
            )
        )
    return out


def wire(d) -> dict:
    """A datum as plain lists, for the test's reference."""
    return {
        "tokens": d.model_input.to_ints(),
        **{k: list(v.data) for k, v in d.loss_fn_inputs.items()},
    }


def only(d, names):
    return types.Datum(
        model_input=d.model_input, loss_fn_inputs={k: d.loss_fn_inputs[k] for k in names}
    )


def logprobs_of(out) -> list[list[float]]:
    return [[float(x) for x in o["logprobs"].data] for o in out.loss_fn_outputs]


LOSS_INPUTS = {
    "cross_entropy": ["target_tokens", "weights"],
    "importance_sampling": ["target_tokens", "logprobs", "advantages"],
    "ppo": ["target_tokens", "logprobs", "advantages"],
    "cispo": ["target_tokens", "logprobs", "advantages"],
    "dro": ["target_tokens", "logprobs", "advantages"],
}
LOSS_CONFIG = {"dro": {"beta": 0.5}, "ppo": {"clip_low_threshold": 0.9, "clip_high_threshold": 1.1}}


def refusal(call) -> dict | None:
    """The status and message of a request the server refuses (None: it was taken)."""
    try:
        done(call())
    except tinker.APIStatusError as exc:
        return {"status": exc.status_code, "message": str(exc)}
    return None


def dimuon(service, warm: list, probe: list) -> dict:
    """Dimuon chosen at creation and stepped with DimuonParams: a fixed batch's loss falls, its
    state resumes exactly, and each family's model refuses the other's step."""
    client = service.create_lora_training_client(
        base_model=TINY, rank=4, seed=13, optimizer=types.DimuonOptimizerConfig()
    )
    fixed = [only(d, LOSS_INPUTS["cross_entropy"]) for d in warm]
    params = types.DimuonParams(learning_rate=0.02, grad_clip_norm=1.0)
    losses = []
    for _ in range(4):
        losses.append(done(client.forward_backward(fixed, "cross_entropy")).metrics["loss:sum"])
        done(client.optim_step(params))
    losses.append(done(client.forward(fixed, "cross_entropy")).metrics["loss:sum"])
    state = done(client.save_state("dimuon-point")).path
    resumed = service.create_training_client_from_state_with_optimizer(state)
    after = []
    for c in (client, resumed):
        done(c.forward_backward(probe, "cross_entropy"))
        done(c.optim_step(params))
        after.append(logprobs_of(done(c.forward(probe, "cross_entropy"))))
    adamw = service.create_lora_training_client(base_model=TINY, rank=4, seed=13)
    done(adamw.forward_backward(fixed, "cross_entropy"))
    # a refused request poisons tinker's client: each is its client's last
    refused = {
        "adam_on_dimuon": refusal(lambda: resumed.optim_step(types.AdamParams())),
        "dimuon_on_adam": refusal(lambda: adamw.optim_step(params)),
    }
    return {"losses": losses, "resumed": after, "path": state, "refused": refused}


def main(base_url: str) -> dict:
    rng = np.random.default_rng(7)
    report: dict = {"version": tinker.__version__}
    service = tinker.ServiceClient(base_url=base_url)
    tc = service.create_lora_training_client(base_model=TINY, rank=4, seed=11)
    report["model_id"] = tc.model_id
    warm = datums(rng, 4, 12)
    # one step so the adapter is not the identity (LoRA B starts at zero)
    done(
        tc.forward_backward([only(d, LOSS_INPUTS["cross_entropy"]) for d in warm], "cross_entropy")
    )
    done(tc.optim_step(types.AdamParams(learning_rate=5e-2)))
    # the weights every later number is computed with, for the test's own reference model
    report["reference_path"] = done(tc.save_weights_for_sampler("reference")).path

    batch = datums(rng, 3, 10)
    report["batch"] = [wire(d) for d in batch]
    report["losses"] = {}
    for loss, names in LOSS_INPUTS.items():
        out = done(tc.forward([only(d, names) for d in batch], loss, LOSS_CONFIG.get(loss)))
        report["losses"][loss] = {"loss": out.metrics["loss:sum"], "logprobs": logprobs_of(out)}

    # a forward between forward_backward and optim_step changes nothing: twin models, same seed
    probe = datums(rng, 2, 8)
    twins = []
    for with_forward in (True, False):
        t = service.create_lora_training_client(base_model=TINY, rank=4, seed=5)
        done(
            t.forward_backward(
                [only(d, LOSS_INPUTS["cross_entropy"]) for d in warm], "cross_entropy"
            )
        )
        if with_forward:
            done(t.forward([only(d, LOSS_INPUTS["ppo"]) for d in batch], "ppo"))
        done(t.optim_step(types.AdamParams(learning_rate=5e-2)))
        out = done(
            t.forward([only(d, LOSS_INPUTS["cross_entropy"]) for d in probe], "cross_entropy")
        )
        twins.append(logprobs_of(out))
    report["twins"] = twins

    # sampling: sampler vs trainer logprobs, seeds, prompt (top-k) logprobs
    sampler = done(tc.save_weights_and_get_sampling_client())
    prompt = [72, 101, 108, 108, 111, 44, 32]
    params = types.SamplingParams(max_tokens=8, temperature=1.0, seed=1234, stop=[])
    res = done(sampler.sample(types.ModelInput.from_ints(prompt), 3, params))
    again = done(sampler.sample(types.ModelInput.from_ints(prompt), 3, params))
    other = types.SamplingParams(max_tokens=8, temperature=1.0, seed=99, stop=[])
    third = done(sampler.sample(types.ModelInput.from_ints(prompt), 3, other))
    seqs = [{"tokens": list(s.tokens), "logprobs": list(s.logprobs)} for s in res.sequences]
    report["samples"] = seqs
    report["same_seed"] = [list(s.tokens) for s in again.sequences]
    report["other_seed"] = [list(s.tokens) for s in third.sequences]
    if VERSION >= (0, 30):
        report["sequence_ids"] = [s.sequence_id for s in res.sequences]
    trained = [
        types.Datum(
            model_input=types.ModelInput.from_ints((prompt + s["tokens"])[:-1]),
            loss_fn_inputs={
                "target_tokens": (prompt + s["tokens"])[1:],
                "weights": [1.0] * (len(prompt) + len(s["tokens"]) - 1),
            },
        )
        for s in seqs
    ]
    report["trainer_logprobs"] = logprobs_of(done(tc.forward(trained, "cross_entropy")))
    lp = done(sampler.compute_logprobs(types.ModelInput.from_ints(prompt + seqs[0]["tokens"])))
    report["compute_logprobs"] = list(lp)
    topk = done(
        sampler.sample(
            types.ModelInput.from_ints(prompt),
            1,
            types.SamplingParams(max_tokens=1, temperature=1.0, seed=3),
            include_prompt_logprobs=True,
            topk_prompt_logprobs=3,
        )
    )
    report["prompt"] = prompt
    report["topk_prompt_logprobs"] = [
        None if row is None else [[int(t), float(v)] for t, v in row]
        for row in topk.topk_prompt_logprobs
    ]

    if VERSION >= (0, 34):  # the sampling options of 0.30-0.34, through protobuf results
        n = len(prompt)
        target = np.full((n - 1, 2), -1, dtype=np.int64)
        target[:, 0] = prompt[1:]
        target[2, 1] = 65
        rich = done(
            sampler.sample(
                types.ModelInput.from_ints(prompt),
                1,
                types.SamplingParams(max_tokens=4, temperature=1.0, seed=8, stop=[]),
                include_prompt_logprobs=True,
                topk_sample_logprobs=3,
                target_prompt_logprobs=types.TensorData.from_numpy(target),
                prompt_alt_tokens_k=2,
                prompt_logprobs_last_n=3,
            )
        )
        seq = rich.sequences[0]
        report["rich"] = {
            "tokens": list(seq.tokens),
            "topk": [[[int(t), float(v)] for t, v in row] for row in seq.topk_logprobs],
            "prompt_logprobs": list(rich.prompt_logprobs),
            "target": np.asarray(rich.target_prompt_logprobs.data).tolist(),
            "target_ids": target.tolist(),
            "alt_tokens": np.asarray(rich.prompt_alt_tokens.tokens.data).tolist(),
            "alt_shape": list(rich.prompt_alt_tokens.tokens.shape),
        }

    # resume: the training state, with its optimizer, continues exactly where it was
    state = done(tc.save_state("resume-point")).path
    resumed = service.create_training_client_from_state_with_optimizer(state)
    step = [only(d, LOSS_INPUTS["cross_entropy"]) for d in probe]
    after = []
    for client in (tc, resumed):
        done(client.forward_backward(step, "cross_entropy"))
        done(client.optim_step(types.AdamParams(learning_rate=5e-2)))
        after.append(logprobs_of(done(client.forward(step, "cross_entropy"))))
    report["resume"] = {"path": state, "logprobs": after}

    if VERSION >= (0, 38):
        report["dimuon"] = dimuon(service, warm, step)

    # the REST calls
    rest = service.create_rest_client()
    run = done(rest.get_training_run(tc.model_id))
    ckpts = done(rest.list_checkpoints(tc.model_id))
    report["rest"] = {
        "training_run_id": run.training_run_id,
        "checkpoints": sorted(c.tinker_path for c in ckpts.checkpoints),
        "runs": [r.training_run_id for r in done(rest.list_training_runs()).training_runs],
    }
    if VERSION >= (0, 30):
        exported = done(tc.save_weights_external("exported")).path
        urls = done(rest.get_external_weights_urls(exported))
        report["rest"]["external"] = {"path": exported, "urls": dict(urls.urls)}
    if VERSION >= (0, 38):
        # a copy inside the account resumes exactly like its source
        copied = done(rest.copy_weights(state, "default", ttl_seconds=3600))
        from_copy = service.create_training_client_from_state_with_optimizer(copied)
        done(from_copy.forward_backward(step, "cross_entropy"))
        done(from_copy.optim_step(types.AdamParams(learning_rate=5e-2)))
        report["rest"]["copy"] = {
            "path": copied,
            "logprobs": logprobs_of(done(from_copy.forward(step, "cross_entropy"))),
        }
        page = rest.search_sessions(types.SessionSearchRequest(limit=200)).result()
        report["rest"]["searched_sessions"] = [s.session_id for s in page.sessions]
        service.close("success", detail="scenarios done").result()
        after = (
            tinker.ServiceClient(base_url=base_url)
            .create_rest_client()
            .search_sessions(
                types.SessionSearchRequest(
                    statuses=[types.ClientFinishedSessionStatusQuery(reasons=["success"])]
                )
            )
            .result()
        )
        report["rest"]["finished_sessions"] = [s.session_id for s in after.sessions]
    return report


if __name__ == "__main__":
    warnings.simplefilter("ignore")
    print(json.dumps(main(sys.argv[1])))
