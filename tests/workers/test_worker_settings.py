"""A worker's settings are parsed in one place (``workers/settings.py``): the Celery process
(``WorkerSettings.from_env``) and ``python -m workers.run`` (its flags over the same variables)
get the same defaults, and what ``run`` hands the Celery process reads back as it meant it."""

from __future__ import annotations

import dataclasses
import socket
from pathlib import Path

import pytest

from workers import run
from workers.settings import WorkerSettings

HOST = socket.gethostname()


def test_no_variable_gives_the_fields_defaults_and_the_host_name() -> None:
    settings = WorkerSettings.from_env({})
    assert settings == WorkerSettings(name=HOST, address=HOST)
    assert (settings.base_model, settings.device, settings.dtype) == (
        "loopwright/tiny-byte-llama",
        "cpu",
        None,
    )
    assert (settings.capacity, settings.max_loaded_adapters, settings.sampler_adapters) == (
        16,
        16,
        8,
    )
    assert (settings.pass_tokens, settings.pass_samples, settings.memory_bytes) == (16384, 64, None)
    assert settings.queue == f"gpu.{HOST}"


def test_the_command_line_without_flags_agrees_with_the_environment() -> None:
    env = {"LOOPWRIGHT_WORKER_CAPACITY": "3", "LOOPWRIGHT_WORKER_SUBNETS": "subnet-a, subnet-b"}
    from_cli, loglevel = run.parse([], env)
    assert from_cli == WorkerSettings.from_env(env) and loglevel == "INFO"
    assert from_cli.capacity == 3 and from_cli.subnet_ids == ("subnet-a", "subnet-b")
    assert run.parse([], {})[0] == WorkerSettings.from_env({})  # the same defaults


def test_every_variable_is_read_and_flags_win() -> None:
    env = {
        "LOOPWRIGHT_WORKER_NAME": "gpu7",
        "LOOPWRIGHT_WORKER_BASE_MODEL": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "LOOPWRIGHT_WORKER_DEVICE": "cuda",
        "LOOPWRIGHT_WORKER_DTYPE": "float32",
        "LOOPWRIGHT_WORKER_CAPACITY": "4",
        "LOOPWRIGHT_WORKER_MAX_LOADED": "5",
        "LOOPWRIGHT_WORKER_SAMPLER_ADAPTERS": "6",
        "LOOPWRIGHT_WORKER_RELEASE_SLACK_MB": "7",
        "LOOPWRIGHT_WORKER_SCRATCH_DIR": "/scratch",
        "LOOPWRIGHT_WORKER_SUBNETS": "subnet-a",
        "LOOPWRIGHT_WORKER_SECURITY_GROUPS": "sg-1,sg-2",
        "LOOPWRIGHT_WORKER_PASS_TOKENS": "1024",
        "LOOPWRIGHT_WORKER_PASS_SAMPLES": "9",
        "LOOPWRIGHT_WORKER_ADDRESS": "10.0.0.7",
        "LOOPWRIGHT_WORKER_MEMORY": "2GiB",
    }
    settings = WorkerSettings.from_env(env)
    assert settings == WorkerSettings(
        name="gpu7",
        base_model="HuggingFaceTB/SmolLM2-135M-Instruct",
        device="cuda",
        dtype="float32",
        capacity=4,
        max_loaded_adapters=5,
        sampler_adapters=6,
        release_slack_mb=7,
        scratch_dir=Path("/scratch"),
        subnet_ids=("subnet-a",),
        security_group_ids=("sg-1", "sg-2"),
        pass_tokens=1024,
        pass_samples=9,
        address="10.0.0.7",
        memory_bytes=2 * 2**30,
    )
    flags = ["--name", "gpu8", "--capacity", "2", "--subnet", "subnet-c", "--memory", "1GiB",
             "--dtype", "", "--snapshot-every-steps", "0"]  # fmt: skip
    given, _ = run.parse(flags, env)
    assert given == dataclasses.replace(
        settings,
        name="gpu8",
        capacity=2,
        subnet_ids=("subnet-c",),
        memory_bytes=2**30,
        dtype=None,
        snapshot_every_steps=0,
    )


def test_what_run_hands_the_celery_process_reads_back_the_same() -> None:
    given, _ = run.parse(["--name", "w", "--security-group", "sg-9", "--memory", "512MiB"], {})
    assert WorkerSettings.from_env(given.to_env()) == dataclasses.replace(
        given, snapshot_every_steps=None, snapshot_every_seconds=None
    )
    assert WorkerSettings.from_env(WorkerSettings(name="x").to_env()).address == HOST


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("LOOPWRIGHT_WORKER_PASS_TOKENS", "0", "LOOPWRIGHT_WORKER_PASS_TOKENS must be at least 1"),
        ("LOOPWRIGHT_WORKER_CAPACITY", "many", "LOOPWRIGHT_WORKER_CAPACITY: 'many' is not a whole"),
        ("LOOPWRIGHT_WORKER_MEMORY", "lots", "LOOPWRIGHT_WORKER_MEMORY: 'lots' is not an amount"),
    ],
)
def test_a_bad_value_names_its_variable(variable: str, value: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        WorkerSettings.from_env({variable: value})


def test_a_bad_flag_is_a_usage_error(capsys) -> None:
    with pytest.raises(SystemExit):
        run.parse(["--capacity", "0"], {})
    assert "LOOPWRIGHT_WORKER_CAPACITY must be at least 1" in capsys.readouterr().err
