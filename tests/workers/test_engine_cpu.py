"""The worker's count of CPU time inside engine calls (``workers/engine_cpu.py``): every call
through the worker's router is counted once under its method, a call made inside another
(``sample`` runs ``sample_many``) under the outer one only, and the time counted is the
process's, within what the test measures around the call itself."""

import time

from controlplane import metrics
from loopwright.types import Datum, ForwardBackwardInput, ModelInput
from workers.engine.adapters import AdapterConfig
from workers.engine.sampler import SampleJob
from workers.replicated_host import ReplicatedHost


def _counted(call: str) -> tuple[float, float]:
    return (
        metrics.ENGINE_CPU_SECONDS.labels(call)._value.get(),
        metrics.ENGINE_CALLS.labels(call)._value.get(),
    )


def test_each_call_is_counted_once_with_its_process_time(tiny_host_factory) -> None:
    router = ReplicatedHost(tiny_host_factory(), lambda model_id: False)
    router.create_adapter("m", AdapterConfig(rank=4, seed=0))
    tokens = list(range(1, 40))
    fwd = ForwardBackwardInput(
        data=[
            Datum(
                model_input=ModelInput.from_ints(tokens[:-1]),
                loss_fn_inputs={"target_tokens": tokens[1:]},
            )
        ],
        loss_fn="cross_entropy",
    )
    seconds0, calls0 = _counted("forward_backward")
    started = time.process_time()
    router.forward_backward("m", fwd)
    around = time.process_time() - started
    seconds1, calls1 = _counted("forward_backward")
    assert calls1 - calls0 == 1
    assert 0 < seconds1 - seconds0 <= around

    sample0, many0 = _counted("sample"), _counted("sample_many")
    router.sample("m", [SampleJob(prompt=[1, 2, 3], max_tokens=4, temperature=0.0)])
    assert _counted("sample")[1] - sample0[1] == 1
    assert _counted("sample_many") == many0  # inside sample: counted as sample's
    router.sample_many([("m", [SampleJob(prompt=[1, 2, 3], max_tokens=4)])])
    assert _counted("sample_many")[1] - many0[1] == 1
