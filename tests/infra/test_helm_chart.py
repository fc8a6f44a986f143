"""The Helm chart, rendered by Helm's own library (tests/infra/helm_render.py) for several sets
of values, every object validated against the Kubernetes schemas (kubernetes-validate, strict:
no field the API does not know), and what the chart promises checked on the rendered objects."""

from __future__ import annotations

import kubernetes_validate
import pytest

from .commands import ROOT, check
from .helm_render import lint, render

CHART = ROOT / "infra" / "helm" / "loopwright"
KUBERNETES = ["1.29.0", "1.31.0"]
REQUIRED = {
    "secrets": {"djangoSecretKey": "django-key", "kmsMasterKey": "kms-key"},
    "database": {"url": "postgres://lw:pw@db.internal:5432/loopwright"},
    "broker": {"url": "redis://:pw@redis.internal:6379/0"},
}
VARIANTS = {
    "defaults": REQUIRED,
    "existing-secret-s3-cpu-pool": {
        "existingSecret": "loopwright-prod",
        "s3": {"endpointUrl": "https://s3.internal", "region": "eu-west-1"},
        "kms": {"awsEndpointUrl": "https://kms.internal"},
        "storage": {"existingClaim": "shared-checkpoints"},
        "controlplane": {"autoscaling": {"enabled": False}, "replicas": 3},
        "image": {"workerVariant": "cpu", "registry": "ghcr.io/acme/", "tag": "1.2.3"},
        "workers": {
            "stopSeconds": 120,
            "pools": [
                {
                    "name": "cpu",
                    "baseModel": "loopwright/tiny-byte-llama",
                    "replicas": 2,
                    "gpus": 0,
                    "device": "cpu",
                    "capacity": 4,
                    "resources": {"requests": {"cpu": "1"}, "limits": {"memory": "4Gi"}},
                },
                {
                    "name": "big",
                    "baseModel": "Qwen/Qwen3-8B",
                    "replicas": 8,
                    "gpus": 1,
                    "device": "cuda",
                    "dtype": "bfloat16",
                    "capacity": 32,
                    "memory": "80GiB",
                    "resources": {"requests": {"cpu": "4"}, "limits": {"memory": "64Gi"}},
                },
            ],
        },
    },
}


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def rendered(request) -> tuple[str, list[dict]]:
    return request.param, render(CHART, VARIANTS[request.param])


def of_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def containers(doc: dict) -> list[dict]:
    spec = doc["spec"]["template"]["spec"]
    return spec.get("initContainers", []) + spec["containers"]


def env(container: dict) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


@pytest.mark.parametrize("version", KUBERNETES)
def test_every_object_is_valid_kubernetes(rendered, version: str) -> None:
    _, docs = rendered
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)


def test_a_wrong_field_is_caught() -> None:
    docs = render(CHART, REQUIRED)
    job = of_kind(docs, "Job")[0]
    job["spec"]["template"]["spec"]["restartPolicy"] = 7
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, KUBERNETES[-1], strict=True)
    job["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"
    job["spec"]["templat"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, KUBERNETES[-1], strict=True)


def test_the_control_plane_scales_and_survives_disruption(rendered) -> None:
    name, docs = rendered
    (deployment,) = [
        d for d in of_kind(docs, "Deployment") if d["metadata"]["name"].endswith("-controlplane")
    ]
    (pod,) = deployment["spec"]["template"]["spec"]["containers"]
    assert pod["readinessProbe"]["httpGet"]["path"] == "/api/v1/healthz"
    assert pod["livenessProbe"]["httpGet"]["path"] == "/api/v1/healthz"
    assert {p["name"] for p in pod["ports"]} == {"http", "metrics"}
    assert env(pod)["LOOPWRIGHT_METRICS_PORT"] == "9100"
    pdbs = [d["metadata"]["name"] for d in of_kind(docs, "PodDisruptionBudget")]
    assert any(n.endswith("-controlplane") for n in pdbs)
    hpas = of_kind(docs, "HorizontalPodAutoscaler")
    if name == "defaults":
        assert len(hpas) == 1 and "replicas" not in deployment["spec"]
    else:
        assert not hpas and deployment["spec"]["replicas"] == 3


def test_workers_one_per_gpu_stopped_gracefully_and_ready_by_their_lease(rendered) -> None:
    name, docs = rendered
    pools = VARIANTS[name].get("workers", {}).get("pools") or [{"gpus": 1}]
    sets = of_kind(docs, "StatefulSet")
    assert len(sets) == len(pools)
    settings = of_kind(docs, "ConfigMap")[0]["data"]
    stop = float(settings["LOOPWRIGHT_WORKER_STOP_SECONDS"])
    for pool, sts in zip(pools, sets, strict=True):
        spec = sts["spec"]["template"]["spec"]
        (worker,) = spec["containers"]
        limits = worker["resources"]["limits"]
        assert limits.get("nvidia.com/gpu", 0) == pool["gpus"]
        assert worker["resources"]["requests"].get("nvidia.com/gpu", 0) == pool["gpus"]
        assert spec["terminationGracePeriodSeconds"] > stop
        assert "preStop" not in worker.get("lifecycle", {})  # SIGTERM itself starts the hand-over
        assert worker["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert worker["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert env(worker)["LOOPWRIGHT_WORKER_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
        # the memory a worker may use: the pool's, or "" (the GPU's); it decides sharding
        assert env(worker)["LOOPWRIGHT_WORKER_MEMORY"] == pool.get("memory", "")
        assert sts["spec"]["podManagementPolicy"] == "Parallel"
    assert len(
        [d for d in of_kind(docs, "PodDisruptionBudget") if "-worker-" in d["metadata"]["name"]]
    ) == len(pools)


def test_secrets_and_external_services(rendered) -> None:
    name, docs = rendered
    secrets = of_kind(docs, "Secret")
    variant = VARIANTS[name]
    expected = variant.get("existingSecret") or "lw-loopwright-secrets"
    if variant.get("existingSecret"):
        assert not secrets
    else:
        (secret,) = secrets
        assert secret["stringData"]["DATABASE_URL"] == REQUIRED["database"]["url"]
        assert secret["stringData"]["LOOPWRIGHT_BROKER_URL"] == REQUIRED["broker"]["url"]
    for workload in (
        of_kind(docs, "Deployment") + of_kind(docs, "StatefulSet") + of_kind(docs, "Job")
    ):
        for c in containers(workload):
            refs = {
                k: v["secretKeyRef"]["name"]
                for k, v in env(c).items()
                if isinstance(v, dict) and "secretKeyRef" in v
            }
            assert refs.keys() >= {
                "DJANGO_SECRET_KEY",
                "LOOPWRIGHT_KMS_MASTER_KEY",
                "DATABASE_URL",
                "LOOPWRIGHT_BROKER_URL",
            }
            assert set(refs.values()) == {expected}
    settings = of_kind(docs, "ConfigMap")[0]["data"]
    if "s3" in variant:
        assert settings["LOOPWRIGHT_S3_ENDPOINT_URL"] == "https://s3.internal"
        assert settings["LOOPWRIGHT_KMS_AWS_ENDPOINT_URL"] == "https://kms.internal"


def test_migrations_run_once_per_release_and_everything_waits_for_them(rendered) -> None:
    _, docs = rendered
    (job,) = of_kind(docs, "Job")
    assert job["metadata"]["name"].endswith("-migrate-1")
    assert job["spec"]["template"]["spec"]["containers"][0]["command"][-2:] == [
        "migrate",
        "--noinput",
    ]
    for workload in of_kind(docs, "Deployment") + of_kind(docs, "StatefulSet"):
        (init,) = workload["spec"]["template"]["spec"]["initContainers"]
        assert init["command"] == ["python", "manage.py", "migrate", "--check"]


def test_nothing_runs_as_root(rendered) -> None:
    _, docs = rendered
    for workload in (
        of_kind(docs, "Deployment") + of_kind(docs, "StatefulSet") + of_kind(docs, "Job")
    ):
        pod = workload["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] == 10001
        for c in containers(workload):
            assert c["securityContext"]["allowPrivilegeEscalation"] is False
            assert c["securityContext"]["readOnlyRootFilesystem"] is True


def test_every_command_in_the_chart_exists() -> None:
    docs = render(CHART, REQUIRED)
    commands = set()
    for workload in (
        of_kind(docs, "Deployment") + of_kind(docs, "StatefulSet") + of_kind(docs, "Job")
    ):
        commands |= {tuple(c["command"]) for c in containers(workload)}
    assert len(commands) == 5  # gunicorn, workers.run, celery beat, migrate, migrate --check
    for command in sorted(commands):
        check(list(command))


def test_missing_secrets_are_refused_by_name() -> None:
    with pytest.raises(
        Exception, match=r"secrets.djangoSecretKey \(or existingSecret\) is required"
    ):
        render(CHART, {})


def test_helm_lint_is_clean() -> None:
    result = lint(CHART)
    assert result["Errors"] is None
    assert all(m["Severity"] <= 1 for m in result["Messages"]), result  # 1: INFO (no icon)
