"""An in-memory Loopwright server behind httpx.MockTransport, for SDK tests without a network.

It validates bodies with the wire types, runs each model's operations in seq_id order, keeps
futures pending for a few polls, and can inject HTTP errors, dropped connections and failures.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
from pydantic import BaseModel, ValidationError

from loopwright import RetryPolicy
from loopwright import types as lw

API_KEY = "tml-test-key"
BASE_MODEL = "loopwright/tiny-byte-llama"
FAST_RETRY = RetryPolicy(max_retry_seconds=5.0, initial_delay=0.001, max_delay=0.01)


class Reject(Exception):
    """Answer the current request with an HTTP error and an ErrorBody."""

    def __init__(self, status: int, detail: str, code: str | None = None, field: str | None = None):
        super().__init__(detail)
        self.status, self.detail, self.code, self.field = status, detail, code, field


class OpFailed(Exception):
    """Complete the current operation as failed."""

    def __init__(self, error: str, category: str = "user", detail: dict | None = None):
        super().__init__(error)
        self.category = category
        self.detail = detail or {}  # more fields of the failure answer (code, resume_from)


@dataclass
class Op:
    request_id: str
    kind: str
    body: dict[str, Any]
    polls_left: int
    model_id: str | None = None
    seq_id: int | None = None
    outcome: dict[str, Any] | None = None


@dataclass
class Model:
    model_id: str
    session_id: str
    base_model: str
    lora: dict[str, Any]
    next_seq: int = 1
    ops: dict[int, Op] = field(default_factory=dict)
    arrivals: list[int] = field(default_factory=list)
    executed: list[tuple[int, str]] = field(default_factory=list)
    steps: int = 0
    last_weights: list[list[float]] = field(default_factory=list)


@dataclass
class Fault:
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    body: dict[str, Any] | None = None
    drop: bool = False
    drop_after: bool = False


class _Lines(httpx.AsyncByteStream):
    """A streamed body; ``broken``: the connection is lost after the lines."""

    def __init__(self, lines: list[bytes], broken: bool) -> None:
        self.lines, self.broken = lines, broken

    async def __aiter__(self):
        for line in self.lines:
            yield line
        if self.broken:
            raise httpx.ReadError("connection lost")


def _now() -> str:
    return datetime.now(UTC).isoformat()


def logprob_of(token: int, steps: int = 0) -> float:
    """The fake model's logprob of a target token."""
    return -0.1 * (1 + token % 5) - 0.01 * steps


class FakeServer:
    """Implements the endpoints the SDK uses; ``transport`` plugs it into the SDK."""

    def __init__(self, pending_polls: int = 2) -> None:
        self.pending_polls = pending_polls
        self.lock = threading.RLock()
        self.log: list[tuple[str, str, Any]] = []
        self.sessions: dict[str, dict[str, Any]] = {}
        self.models: dict[str, Model] = {}
        self.ops: dict[str, Op] = {}
        self.keys: dict[tuple[Any, ...], Op] = {}
        self.checkpoints: dict[str, dict[str, Any]] = {}
        self.samplers: dict[str, dict[str, Any]] = {}
        self.sampler_keys: dict[tuple[str, int], str] = {}
        self.heartbeats: Counter[str] = Counter()
        self.faults: dict[str, list[Fault]] = {}
        self.op_failures: dict[str, list[OpFailed]] = {}
        self.ids = itertools.count(1)
        self.hold = False
        # Prefer: wait (answers with the outcome on the submit's own response, as NDJSON)
        self.streams = False
        self.streamed: list[str] = []  # the paths whose answers carried their outcome
        self.stream_pending = 0  # the next streamed answers say try_again instead
        self.cut_streams = 0  # the next streamed answers break off after the handle
        # the placement queue: the places create_model's pending answers report, one per poll
        # (the last one again and again while ``queue_forever``), and a new sampler's place
        self.queue_places: list[dict[str, Any]] = []
        self.queue_forever = False
        self.sampler_queue: dict[str, Any] | None = None
        self.transport = httpx.MockTransport(self.handle)

    # -- test controls -------------------------------------------------------------------------

    def fail_http(self, path: str, status: int, times: int = 1, **kw: Any) -> None:
        self.faults.setdefault(path, []).extend(Fault(status=status, **kw) for _ in range(times))

    def drop(self, path: str, times: int = 1) -> None:
        self.faults.setdefault(path, []).extend(Fault(drop=True) for _ in range(times))

    def drop_after(self, path: str, times: int = 1) -> None:
        """Handle the request, then lose the answer (the client sees a broken connection)."""
        self.faults.setdefault(path, []).extend(Fault(drop_after=True) for _ in range(times))

    def fail_operation(
        self, kind: str, error: str, category: str = "server", detail: dict | None = None
    ) -> None:
        self.op_failures.setdefault(kind, []).append(OpFailed(error, category, detail))

    def calls(self, path: str) -> list[Any]:
        with self.lock:
            return [body for _, p, body in self.log if p == path]

    # -- dispatch ------------------------------------------------------------------------------

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path.removeprefix("/api/v1/")
        body = json.loads(request.content) if request.content else None
        with self.lock:
            self.log.append((request.method, path, body))
            queue = self.faults.get(path)
            fault = queue.pop(0) if queue else None
            if fault is not None and fault.drop:
                raise httpx.ConnectError("connection refused", request=request)
            if fault is not None and not fault.drop_after:
                error = fault.body or {"detail": "injected"}
                return httpx.Response(fault.status, headers=fault.headers, json=error)
            response = self._answer(request, path, body)
            if fault is not None:
                raise httpx.RemoteProtocolError("connection lost", request=request)
            if self.streams and "wait=" in request.headers.get("Prefer", ""):
                return self._streamed(path, response)
            return response

    def _streamed(self, path: str, response: httpx.Response) -> httpx.Response:
        """A future's handle, then its outcome as the server has it after waiting for it."""
        handle = response.json() if response.status_code == 200 else None
        if not isinstance(handle, dict) or "request_id" not in handle:
            return response
        op = self.ops[handle["request_id"]]
        if self.stream_pending:
            self.stream_pending -= 1
            outcome: Any = {"type": "try_again", "request_id": op.request_id}
        else:
            if op.outcome is None and not self.hold:
                op.polls_left = 0
                if op.model_id is not None and op.seq_id is not None:
                    self._advance(self.models[op.model_id])
                else:
                    self._complete(op)
            outcome = op.outcome or {"type": "try_again", "request_id": op.request_id}
        self.streamed.append(path)
        lines = [json.dumps(handle).encode() + b"\n", json.dumps(outcome).encode() + b"\n"]
        if self.cut_streams:
            self.cut_streams -= 1
            lines = [lines[0]]
        stream = _Lines(lines, broken=len(lines) == 1)
        return httpx.Response(200, headers={"Content-Type": "application/x-ndjson"}, stream=stream)

    def _answer(self, request: httpx.Request, path: str, body: Any) -> httpx.Response:
        try:
            if request.headers.get("X-API-Key") != API_KEY:
                raise Reject(401, "invalid API key", "authentication_failed")
            return self._route(request.method, path, body, dict(request.url.params))
        except Reject as exc:
            error = {"detail": exc.detail, "code": exc.code, "field": exc.field}
            return httpx.Response(exc.status, json=error)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(p) for p in first["loc"])
            error = {"detail": first["msg"], "code": "invalid", "field": loc}
            return httpx.Response(400, json=error)

    def _route(self, method: str, path: str, body: Any, params: dict[str, str]) -> httpx.Response:
        if path.startswith("sessions/"):
            session_id, _, action = path.removeprefix("sessions/").partition("/")
            session = self._session(session_id)
            if action == "stop" and method == "POST":
                session["state"] = "stopped"
            return self._json(session)
        handler = getattr(self, f"_{method.lower()}_{path.replace('/', '_')}", None)
        if handler is None:
            raise Reject(404, f"no endpoint {method} {path}")
        result: Any = handler(body) if method == "POST" else handler(params)
        return self._json(result)

    @staticmethod
    def _json(data: Any) -> httpx.Response:
        if isinstance(data, BaseModel):
            data = data.model_dump(mode="json")
        return httpx.Response(200, json=data)

    def _session(self, session_id: str, live: bool = False) -> dict[str, Any]:
        session = self.sessions.get(session_id)
        if session is None:
            raise Reject(404, "no such session", "not_found")
        if live and session["state"] != "active":
            raise Reject(410, "the session is stopped", "session_finished")
        return session

    def _future(self, kind: str, body: dict[str, Any], key: tuple[Any, ...], **kw: Any) -> dict:
        existing = self.keys.get(key)
        if existing is not None:
            if existing.body != body:
                raise Reject(409, "seq_id reused with another body", "seq_id_conflict")
            return {"request_id": existing.request_id, "model_id": existing.model_id}
        op = Op(f"req-{next(self.ids)}", kind, body, self.pending_polls, **kw)
        self.ops[op.request_id] = op
        self.keys[key] = op
        if op.model_id is not None and op.seq_id is not None:
            model = self.models[op.model_id]
            model.ops[op.seq_id] = op
            model.arrivals.append(op.seq_id)
        return {"request_id": op.request_id, "model_id": op.model_id}

    # -- server, sessions, catalog -------------------------------------------------------------

    def _post_client_config(self, body: Any) -> Any:
        return lw.ClientConfigResponse()

    def _get_healthz(self, params: Any) -> Any:
        return {"status": "ok"}

    def _get_get_server_capabilities(self, params: Any) -> Any:
        return {"supported_models": [{"model_name": BASE_MODEL, "max_context_length": 512}]}

    def _get_base_models(self, params: Any) -> Any:
        model = {"name": BASE_MODEL, "context_length": 512, "description": "tiny"}
        return {"base_models": [model]}

    def _get_base_models_tokenizer(self, params: dict[str, str]) -> Any:
        if params.get("name") != BASE_MODEL:
            raise Reject(404, "no such base model", "not_found", "name")
        from fake_ops import tokenizer_files

        return {"base_model": BASE_MODEL, "files": tokenizer_files()}

    def _post_create_session(self, body: Any) -> Any:
        request = lw.CreateSessionRequest.model_validate(body)
        session_id = f"sess-{next(self.ids)}"
        self.sessions[session_id] = {
            **request.model_dump(exclude={"type", "sdk_version", "project_id"}),
            "session_id": session_id,
            "state": "active",
            "created_at": _now(),
            "model_ids": [],
            "sampling_session_ids": [],
        }
        return {"session_id": session_id}

    def _post_session_heartbeat(self, body: Any) -> Any:
        request = lw.SessionHeartbeatRequest.model_validate(body)
        self.heartbeats[request.session_id] += 1
        self._session(request.session_id, live=True)["last_heartbeat_at"] = _now()
        return {}

    def _get_sessions(self, params: Any) -> Any:
        return {"sessions": list(reversed(self.sessions.values()))}

    # -- models and training -------------------------------------------------------------------

    def _model(self, model_id: str) -> Model:
        model = self.models.get(model_id)
        if model is None:
            raise Reject(404, "no such model", "not_found", "model_id")
        self._session(model.session_id, live=True)
        return model

    def _post_create_model(self, body: Any) -> Any:
        request = lw.CreateModelRequest.model_validate(body)
        session = self._session(request.session_id, live=True)
        key = ("model", request.session_id, request.model_seq_id)
        if key not in self.keys:
            model_id = f"{request.session_id}:train:{request.model_seq_id}"
            lora = request.lora_config or lw.LoraConfig(rank=32)
            family = request.optimizer_config.type if request.optimizer_config else "adamw"
            self.models[model_id] = Model(
                model_id,
                request.session_id,
                request.base_model,
                {**lora.model_dump(), "optimizer": family},
            )
            session["model_ids"].append(model_id)
        handle = self._future("create_model", body, key, model_id=f"{key[1]}:train:{key[2]}")
        return {**handle, "queue": self.queue_places[0]} if self.queue_places else handle

    def _post_get_info(self, body: Any) -> Any:
        model = self._model(lw.GetInfoRequest.model_validate(body).model_id)
        return {
            "model_id": model.model_id,
            "model_data": {"model_name": model.base_model, "arch": "fake"},
            "is_lora": True,
            "lora_rank": model.lora["rank"],
        }

    def _post_unload_model(self, body: Any) -> Any:
        request = lw.UnloadModelRequest.model_validate(body)
        self._model(request.model_id)
        return self._future("unload_model", body, ("unload", request.model_id, next(self.ids)))

    def _ordered(self, kind: str, cls: type[BaseModel], body: Any) -> Any:
        request: Any = cls.model_validate(body)
        self._model(request.model_id)
        key = (request.model_id, request.seq_id)
        return self._future(kind, body, key, model_id=request.model_id, seq_id=request.seq_id)

    def _post_forward(self, body: Any) -> Any:
        return self._ordered("forward", lw.ForwardRequest, body)

    def _post_forward_backward(self, body: Any) -> Any:
        return self._ordered("forward_backward", lw.ForwardBackwardRequest, body)

    def _post_optim_step(self, body: Any) -> Any:
        return self._ordered("optim_step", lw.OptimStepRequest, body)

    def _post_save_weights(self, body: Any) -> Any:
        return self._ordered("save_weights", lw.SaveWeightsRequest, body)

    def _post_save_weights_for_sampler(self, body: Any) -> Any:
        return self._ordered("save_weights_for_sampler", lw.SaveWeightsForSamplerRequest, body)

    def _post_load_weights(self, body: Any) -> Any:
        return self._ordered("load_weights", lw.LoadWeightsRequest, body)

    def _post_weights_info(self, body: Any) -> Any:
        request = lw.WeightsInfoRequest.model_validate(body)
        checkpoint = self.checkpoints.get(request.tinker_path)
        if checkpoint is None:
            raise Reject(404, "no such checkpoint", "not_found", "tinker_path")
        return {"base_model": checkpoint["base_model"], "is_lora": True, **checkpoint["lora"]}

    # -- sampling ------------------------------------------------------------------------------

    def _open_sampler(self, session_id: str, seq: int, **source: Any) -> str:
        key = (session_id, seq)
        if key not in self.sampler_keys:
            sampler_id = f"samp-{next(self.ids)}"
            self.sampler_keys[key] = sampler_id
            self.samplers[sampler_id] = source
            self.sessions[session_id]["sampling_session_ids"].append(sampler_id)
        return self.sampler_keys[key]

    def _post_create_sampling_session(self, body: Any) -> Any:
        request = lw.CreateSamplingSessionRequest.model_validate(body)
        self._session(request.session_id, live=True)
        sources = [request.base_model, request.model_path, request.model_id]
        if sum(s is not None for s in sources) != 1:
            raise Reject(400, "give one of base_model, model_path, model_id", "invalid")
        if request.model_path is not None:
            checkpoint = self.checkpoints.get(request.model_path)
            if checkpoint is None or checkpoint["kind"] != "sampler":
                raise Reject(404, "no such sampler checkpoint", "not_found", "model_path")
        if request.model_id is not None:
            self._model(request.model_id)
        sampler_id = self._open_sampler(
            request.session_id,
            request.sampling_session_seq_id,
            base_model=request.base_model,
            model_path=request.model_path,
            model_id=request.model_id,
        )
        return {"sampling_session_id": sampler_id, "queue": self.sampler_queue}

    def _post_asample(self, body: Any) -> Any:
        request = lw.SampleRequest.model_validate(body)
        if request.sampling_session_id not in self.samplers:
            raise Reject(404, "no such sampling session", "not_found", "sampling_session_id")
        return self._future(
            "asample", body, ("sample", request.sampling_session_id, request.seq_id)
        )

    # -- futures -------------------------------------------------------------------------------

    def _post_retrieve_future(self, body: Any) -> Any:
        request = lw.FutureRetrieveRequest.model_validate(body)
        op = self.ops.get(request.request_id)
        if op is None:
            raise Reject(404, "no such future", "not_found", "request_id")
        if op.kind == "create_model" and op.outcome is None and self.queue_places:
            last = self.queue_forever and len(self.queue_places) == 1
            place = self.queue_places[0] if last else self.queue_places.pop(0)
            return {
                "type": "try_again",
                "request_id": op.request_id,
                "queue_state": "paused_capacity",
                "queue_state_reason": place["reason"],
                "queue": place,
            }
        if op.outcome is None and not self.hold:
            op.polls_left = max(0, op.polls_left - 1)
            if op.model_id is not None and op.seq_id is not None:
                self._advance(self.models[op.model_id])
            elif op.polls_left == 0:
                self._complete(op)
        if op.outcome is None:
            if op.polls_left % 2 and not self.hold:
                raise Reject(408, "still running", "pending")
            return {"type": "try_again", "request_id": op.request_id, "queue_state": "active"}
        return op.outcome

    def _advance(self, model: Model) -> None:
        """Run the model's operations whose turn has come, strictly in seq_id order."""
        while (op := model.ops.get(model.next_seq)) is not None and op.polls_left == 0:
            model.executed.append((model.next_seq, op.kind))
            self._complete(op)
            model.next_seq += 1

    def _complete(self, op: Op) -> None:
        failures = self.op_failures.get(op.kind)
        try:
            if failures:
                raise failures.pop(0)
            op.outcome = run_operation(self, op)
        except OpFailed as exc:
            op.outcome = {"error": str(exc), "category": exc.category, **exc.detail}


def run_operation(server: FakeServer, op: Op) -> dict[str, Any]:
    """The result of one operation (see fake_ops)."""
    from fake_ops import run

    return run(server, op)
