"""What a ServiceClient can say about cost: a session's usage and cost so far (printed when
asked, and at each session's end with ``report_cost=True``), budgets, and a checkpoint's expiry."""

from __future__ import annotations

import sys
from typing import IO, Any
from urllib.parse import quote

from ._runtime import Runtime, wire
from .types.billing import Budget, BudgetCreateRequest, SessionUsage
from .types.checkpoints import ParsedCheckpointTinkerPath

__all__ = ["Costs"]


class Costs:
    """Cost, budgets and checkpoint expiry, for ``ServiceClient``."""

    _runtime: Runtime

    def _default_session_id(self) -> str:  # the ServiceClient's default session
        raise NotImplementedError

    def get_session_usage(self, session_id: str | None = None) -> SessionUsage:
        """A session's tokens and cost so far (by default, this client's session)."""
        sid = session_id or self._default_session_id()
        return self._runtime.get(f"sessions/{quote(sid, safe='')}/usage", SessionUsage)

    def print_cost(
        self, session_id: str | None = None, *, file: IO[str] | None = None
    ) -> SessionUsage:
        """Print ``session sess-…: 12,345 tokens, $0.004321 so far``; returns the usage."""
        usage = self.get_session_usage(session_id)
        print(usage.describe(), file=file or sys.stdout)
        return usage

    def list_budgets(self) -> list[Budget]:
        """The account's budgets with this period's spend."""
        answer = self._runtime.http.request("GET", "billing/budgets").json()
        return [Budget.model_validate(b) for b in answer.get("budgets", [])]

    def create_budget(self, **fields: Any) -> Budget:
        """Make a budget (``BudgetCreateRequest``'s fields); its webhook secret, if it has a
        webhook, is in ``webhook_secret`` of the answer, only this once."""
        body = wire(BudgetCreateRequest(**fields))
        answer = self._runtime.http.request("POST", "billing/budgets", body=body).json()
        return Budget.model_validate(answer)

    def get_budget(self, name: str) -> Budget:
        return self._runtime.get(f"billing/budgets/{quote(name, safe='')}", Budget)

    def delete_budget(self, name: str) -> None:
        self._runtime.http.request("DELETE", f"billing/budgets/{quote(name, safe='')}")

    def set_checkpoint_ttl_from_tinker_path(
        self, tinker_path: str, ttl_seconds: int | None
    ) -> None:
        """Expire a checkpoint ``ttl_seconds`` from now (1 hour to 10 years), or never (None),
        without loading it."""
        parsed = ParsedCheckpointTinkerPath.from_tinker_path(tinker_path)
        run, checkpoint = quote(parsed.training_run_id, safe=""), parsed.checkpoint_id
        self._runtime.http.request(
            "PUT",
            f"training_runs/{run}/checkpoints/{checkpoint}/ttl",
            body={"ttl_seconds": ttl_seconds},
        )
