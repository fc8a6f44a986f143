"""``helm template`` without a helm binary: Helm's own Go library (the helm-sdkpy wheel) installs
the chart into a stand-in for a cluster's API server that answers discovery and accepts every
object; the manifest Helm rendered comes back with the release. No binary of helm can be
installed from PyPI, npm or Debian here; its library can, and it is the same engine (templates,
sprig, ``required``, values schema).

Only what a client-side ``helm install`` asks is answered: the server version, the API groups
and resources of the kinds a chart may hold, an empty list of releases, 404 for any object
(nothing exists yet), and the echo of any object created.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml

KINDS = {
    "v1": [("configmaps", "ConfigMap"), ("secrets", "Secret"), ("services", "Service"),
           ("serviceaccounts", "ServiceAccount"), ("persistentvolumeclaims", "PersistentVolumeClaim")],
    "apps/v1": [("deployments", "Deployment"), ("statefulsets", "StatefulSet")],
    "batch/v1": [("jobs", "Job")],
    "autoscaling/v2": [("horizontalpodautoscalers", "HorizontalPodAutoscaler")],
    "policy/v1": [("poddisruptionbudgets", "PodDisruptionBudget")],
}  # fmt: skip
KUBE_VERSION = ("1", "31")


def _resources(group_version: str) -> dict:
    verbs = ["create", "delete", "get", "list", "patch", "update", "watch"]
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": [
            {"name": n, "singularName": "", "namespaced": True, "kind": k, "verbs": verbs}
            for n, k in KINDS[group_version]
        ],
    }


class _ApiServer(BaseHTTPRequestHandler):
    def _send(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        groups = [gv for gv in KINDS if "/" in gv]
        if path == "/version":
            major, minor = KUBE_VERSION
            return self._send(
                200, {"major": major, "minor": minor, "gitVersion": f"v{major}.{minor}.0"}
            )
        if path == "/api":
            return self._send(200, {"kind": "APIVersions", "versions": ["v1"]})
        if path == "/apis":
            listed = [
                {"name": gv.split("/")[0], "versions": [{"groupVersion": gv, "version": gv.split("/")[1]}],
                 "preferredVersion": {"groupVersion": gv, "version": gv.split("/")[1]}}
                for gv in groups
            ]  # fmt: skip
            return self._send(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": listed})
        if path == "/api/v1":
            return self._send(200, _resources("v1"))
        if path.startswith("/apis/") and path.removeprefix("/apis/") in groups:
            return self._send(200, _resources(path.removeprefix("/apis/")))
        if path.endswith("/secrets"):  # Helm's release records: none yet
            return self._send(200, {"kind": "SecretList", "apiVersion": "v1", "items": []})
        self._send(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                         "reason": "NotFound", "code": 404})  # fmt: skip

    def _echo(self, status: int) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:  # objects come as JSON; Helm's own release record as protobuf
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {"kind": "Secret", "apiVersion": "v1", "metadata": {"name": "release"}}
        body.setdefault("metadata", {})["resourceVersion"] = "1"
        self._send(status, body)

    def do_POST(self) -> None:
        self._echo(201)

    def do_PUT(self) -> None:
        self._echo(200)

    def do_PATCH(self) -> None:
        self._echo(200)

    def log_message(self, format: str, *args) -> None:
        pass


def render(
    chart: Path, values: dict, *, release: str = "lw", namespace: str = "loopwright"
) -> list[dict]:
    """The chart's manifests for ``values``, as Helm renders them (a list of objects)."""
    import helm_sdkpy

    server = ThreadingHTTPServer(("127.0.0.1", 0), _ApiServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with tempfile.TemporaryDirectory() as folder:
            kubeconfig = Path(folder) / "kubeconfig"
            kubeconfig.write_text(yaml.safe_dump({
                "apiVersion": "v1", "kind": "Config", "current-context": "c",
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{server.server_address[1]}"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": namespace}}],
                "users": [{"name": "u", "user": {"token": "unused"}}],
            }))  # fmt: skip
            config = helm_sdkpy.Configuration(namespace=namespace, kubeconfig=str(kubeconfig))
            done = asyncio.run(
                helm_sdkpy.Install(config).run(release, str(chart), values=values, wait=False)
            )
    finally:
        server.shutdown()
        server.server_close()
    return [doc for doc in yaml.safe_load_all(done["manifest"]) if doc]


def lint(chart: Path) -> dict:
    """``helm lint`` of the chart with its own values."""
    import helm_sdkpy

    return asyncio.run(helm_sdkpy.Lint(helm_sdkpy.Configuration()).run(str(chart)))
