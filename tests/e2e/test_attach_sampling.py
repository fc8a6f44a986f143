"""The dashboard's "continue from your script" snippet, run twice: each run attaches to the same
model, trains, and samples from the weights it just trained (not the first run's sampler)."""

from __future__ import annotations

import pytest

from loopwright import ServiceClient
from loopwright.types import AdamParams, SamplingParams

from .stack import TINY
from .test_sessions_e2e import sft_datums

pytestmark = pytest.mark.e2e


def test_a_second_run_of_an_attached_script_samples_its_own_weights(pg_stack) -> None:
    key, role = pg_stack.keys["alice"], pg_stack.roles["alice"]
    with ServiceClient(base_url=pg_stack.url, api_key=key, role_arn=role) as owner:
        model_id = owner.create_lora_training_client(TINY, rank=4, seed=5).model_id
        samplers = []
        for _ in range(2):  # two runs of the same script, each in a process of its own
            with ServiceClient(base_url=pg_stack.url, api_key=key) as script:
                training_client = script.create_training_client(model_id)
                tokenizer = training_client.get_tokenizer()
                data = sft_datums(tokenizer)
                training_client.forward_backward(data, loss_fn="cross_entropy").result()
                training_client.optim_step(AdamParams(learning_rate=1e-2)).result()
                sampling_client = training_client.save_weights_and_get_sampling_client()
                out = sampling_client.sample(
                    tokenizer.encode("2 + 2 ="),
                    num_samples=2,
                    sampling_params=SamplingParams(max_tokens=4, seed=1),
                ).result(timeout=120)
                assert len(out.sequences) == 2
                samplers.append(sampling_client.sampling_session_id)
        assert samplers[0] != samplers[1]  # the second run's sampler holds its own weights
