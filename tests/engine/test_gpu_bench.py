"""The accelerator benchmark runs end to end on a CPU with its small preset, and its roofline
and FLOP counts agree with the arithmetic written out by hand."""

from __future__ import annotations

import pytest

from bench import gpu_bench


def test_the_smoke_preset_runs_and_reports_every_figure() -> None:
    report = gpu_bench.main(["--preset", "smoke", "--device", "cpu", "--steps", "1", "--json"])
    preset = gpu_bench.PRESETS["smoke"]
    assert report["decode_batch"] == preset.sessions * preset.samples
    for key in (
        "decode_tokens_per_s",
        "decode_roofline_tokens_per_s_measured",
        "train_tokens_per_s",
        "measured_matmul_tflops",
        "mfu_vs_measured_matmul",
    ):
        assert report[key] > 0, key
    # the parameters counted from the shapes: per layer q and o (d x d), k and v (d x kv),
    # the MLP (3 x d x f) and two norms; then the embeddings, the unembedding and the last norm
    d, f, v, layers = 64, 172, 512, 2
    kv = d // 4 * 2  # 2 kv heads of head_dim d / 4
    per_layer = d * d * 2 + d * kv * 2 + 3 * d * f + 2 * d  # q,o + k,v + mlp + 2 norms
    assert report["parameters"] == layers * per_layer + 2 * v * d + d


class _Param:
    def __init__(self, n: int) -> None:
        self._n = n

    def numel(self) -> int:
        return self._n

    def element_size(self) -> int:
        return 2


def test_decode_roofline_is_batch_times_bandwidth_over_bytes_per_step() -> None:
    preset = gpu_bench.PRESETS["1b"]

    class Model:
        def parameters(self):
            return iter([_Param(1)])

        def named_parameters(self):
            return [("w", _Param(1_000_000_000)), ("x.lora_A", _Param(123))]

    class Host:
        class pool:
            model = Model()

    # weights 2e9 bytes; KV: 2 (k, v) x 22 layers x 4 heads x 64 dims x 2 bytes x 256 mean
    # positions x 64 sequences
    kv = 2 * 22 * 4 * 64 * 2 * (128 + 128) * 64
    want = 64 * 4.8e12 / (2e9 + kv)
    assert gpu_bench.decode_roofline(Host(), preset, 4.8e12, 64) == pytest.approx(want)


def test_training_flops_per_token() -> None:
    preset = gpu_bench.PRESETS["1b"]
    attention = 4 * 22 * 512 * 2048  # forward, at a mean causal context of 1024 / 2
    assert gpu_bench.training_flops_per_token(10**9, preset) == pytest.approx(4e9 + 3 * attention)
