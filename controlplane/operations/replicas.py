"""How many data-parallel replicas a new training model may ask for: a whole number from 1, at
most the tenant's ``max_replicas`` quota and the live workers that serve its base model. Where
the replicas then run (forming a group of workers) is placement's business."""

from __future__ import annotations

from controlplane.errors import DomainError, RequestOverQuota, shown
from controlplane.fleet.services import live_workers
from controlplane.metrics import QUOTA_REFUSALS
from controlplane.quotas.limits import limits_for
from controlplane.tenants.models import Tenant


class TooFewWorkers(DomainError):
    """More replicas than live workers serve the base model: no group of that size can form."""

    code = "not_enough_workers"


class ShardedBase(DomainError):
    """The base model is served only sharded: a model on it has one (sharded) replica."""

    code = "sharded_base"


def replicas_number(value: object) -> int:
    """``value`` if it is a whole number from 1, else a 400 naming the field ``replicas``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise DomainError(
            f"replicas: must be a whole number, 1 or more; got {shown(value)}", field="replicas"
        )
    return value


def replicas_checked(*, tenant: Tenant, base_model: str, replicas: object) -> int:
    """``replicas`` if a new model on ``base_model`` may ask for it; else a 400 naming the field
    ``replicas``: not a whole number from 1, above the tenant's ``max_replicas`` quota (counted
    as a quota refusal), or above the live workers that serve the base model (only counted when
    it asks for more than one: a single replica waits for a worker as before)."""
    replicas = replicas_number(replicas)
    limit = limits_for(tenant).max_replicas
    if replicas > limit:
        QUOTA_REFUSALS.labels("max_replicas").inc()
        raise RequestOverQuota(
            f"replicas: {replicas} is above the limit of account {tenant.account_id}, "
            f"{limit} replicas per training model (its max_replicas quota); ask for {limit} or "
            "fewer, or have an operator raise it (manage.py set_quota --max-replicas)",
            field="replicas",
        )
    if replicas > 1:
        serving = live_workers().filter(base_model_id=base_model)
        live = serving.filter(shard_ranks=1).count()
        if live == 0 and serving.exists():
            raise ShardedBase(
                f"replicas: {base_model} is sharded over several workers (none holds it whole), "
                "and a sharded base trains on one replica; ask for 1",
                field="replicas",
            )
        if replicas > live:
            serve = "live worker serves" if live == 1 else "live workers serve"
            raise TooFewWorkers(
                f"replicas: {replicas} is more than the workers that could train it: {live} "
                f"{serve} {base_model} now; ask for {max(live, 1)} or fewer, or try again once "
                "more workers have started",
                field="replicas",
            )
    return replicas
