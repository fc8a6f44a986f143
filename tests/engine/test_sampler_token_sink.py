"""The sampler tells a listener each token as it is drawn: exactly what the results hold, at
its position, for every job and sample of a continuous batch (jobs joining later included),
and the results are the same with or without a listener."""

from __future__ import annotations

from collections import defaultdict

from workers.engine.adapters import AdapterConfig
from workers.engine.sampler import SampledToken, SampleJob


def _jobs() -> list[SampleJob]:
    return [
        SampleJob(prompt=[5, 6, 7], num_samples=2, max_tokens=9, seed=1, topk_logprobs=3),
        SampleJob(prompt=[9, 8], num_samples=1, max_tokens=4, seed=2, stop_tokens=[]),
        SampleJob(prompt=[3, 4, 5, 6], num_samples=3, max_tokens=7, seed=3, temperature=0.7),
    ]


def _heard_as_sequences(heard: list[SampledToken]) -> dict[tuple[int, int], list[SampledToken]]:
    by_seq: dict[tuple[int, int], list[SampledToken]] = defaultdict(list)
    for t in heard:
        by_seq[(t.job, t.sample)].append(t)
    return by_seq


def test_what_is_heard_is_what_the_results_hold(make_host) -> None:
    host = make_host(max_sample_rows=3)  # rows wait and join the running batch later
    host.create_adapter("a", AdapterConfig(rank=4, seed=0))
    steps: list[list[SampledToken]] = []
    results = host.sample("a", _jobs(), steps.append)
    assert len(steps) > 1 and all(steps)
    by_seq = _heard_as_sequences([t for step in steps for t in step])
    for j, result in enumerate(results):
        for s, seq in enumerate(result.sequences):
            heard = by_seq.pop((j, s))
            assert [t.position for t in heard] == list(range(len(seq.tokens)))
            assert [t.token for t in heard] == seq.tokens
            assert [t.logprob for t in heard] == seq.logprobs
            assert [t.top for t in heard] == (seq.topk_logprobs or [None] * len(seq.tokens))
    assert not by_seq  # nothing heard that no result holds
    plain = make_host(max_sample_rows=3)
    plain.create_adapter("a", AdapterConfig(rank=4, seed=0))
    assert [r.sequences for r in plain.sample("a", _jobs())] == [r.sequences for r in results]


def test_jobs_are_numbered_across_the_requests_of_a_mixed_batch(host) -> None:
    host.create_adapter("a", AdapterConfig(rank=4, seed=0))
    jobs = _jobs()
    heard: list[SampledToken] = []
    out = host.sample_many(
        [(None, jobs[:1]), ("a", jobs[1:]), ("missing", jobs[:1])], lambda ts: heard.extend(ts)
    )
    assert isinstance(out[2], Exception)  # an unknown adapter fails alone, and is never heard
    by_seq = _heard_as_sequences(heard)
    results = [*out[0], *out[1]]  # type: ignore[misc]
    assert sorted({job for job, _ in by_seq}) == [0, 1, 2]
    for j, result in enumerate(results):
        for s, seq in enumerate(result.sequences):
            assert [t.token for t in by_seq[(j, s)]] == seq.tokens
