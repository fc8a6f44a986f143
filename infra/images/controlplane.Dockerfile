# syntax=docker/dockerfile:1
# The control plane: API, dashboard and /metrics (gunicorn); with another command also the
# migrations (python manage.py migrate) and housekeeping (celery ... -B -Q housekeeping).
# Build from the repository root:
#   docker build -f infra/images/controlplane.Dockerfile -t loopwright/controlplane .
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
# Dependencies first, every one pinned (infra/images/lock.py): reused until the list changes.
COPY infra/images/requirements-server.txt /tmp/requirements.txt
RUN pip install --no-deps -r /tmp/requirements.txt
COPY sdk /src/sdk
RUN pip install --no-deps /src/sdk

FROM ${PYTHON_IMAGE}
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONPATH=/srv/loopwright \
    PYTHONUNBUFFERED=1 \
    DJANGO_SETTINGS_MODULE=controlplane.settings \
    LOOPWRIGHT_DATA_DIR=/var/lib/loopwright \
    LOOPWRIGHT_LOG_FORMAT=json \
    LOOPWRIGHT_HTTP_PORT=8000
# A user of its own: nothing in this image runs as root.
RUN groupadd --system --gid 10001 loopwright \
    && useradd --system --uid 10001 --gid loopwright --home-dir /var/lib/loopwright \
       --create-home --shell /usr/sbin/nologin loopwright \
    && install -d -o loopwright -g loopwright /var/lib/loopwright/storage
COPY --from=build /opt/venv /opt/venv
WORKDIR /srv/loopwright
COPY manage.py ./
COPY controlplane ./controlplane
COPY web ./web
USER 10001:10001
EXPOSE 8000 9100
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/api/v1/healthz' % os.environ['LOOPWRIGHT_HTTP_PORT'], timeout=4)"]
CMD ["gunicorn", "-c", "python:controlplane.gunicorn_conf", "controlplane.wsgi:application"]
