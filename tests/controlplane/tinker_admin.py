"""What the official tinker SDK (0.38) reads of costs and does to a checkpoint's expiry, run in
a process of its own: ``python tinker_admin.py BASE_URL TINKER_PATH STARTING_ON ENDING_BEFORE``
with ``TINKER_API_KEY``. It imports nothing from this repository and prints one JSON object."""

from __future__ import annotations

import json
import sys
import warnings
from collections import defaultdict

import tinker
from tinker import types

warnings.simplefilter("ignore")


def main(base_url: str, path: str, starting_on: str, ending_before: str) -> dict:
    rest = tinker.RestClient(base_url=base_url)
    rest.set_checkpoint_ttl_from_tinker_path(path, 7200).result()
    run = types.ParsedCheckpointTinkerPath.from_tinker_path(path).training_run_id
    listed = rest.list_checkpoints(run).result().checkpoints
    expiry = next(c.expires_at for c in listed if c.tinker_path == path)
    admin = tinker.AdminClient(base_url=base_url)
    usage = admin.get_billing_usage(starting_on, ending_before).result()
    assert isinstance(usage, types.BillingUsageResponse)
    tokens: dict[str, int] = defaultdict(int)
    cost: dict[str, float] = defaultdict(float)
    kinds = set()
    for event in usage.data:
        info = event.event_info
        kinds.add(type(info).__name__)
        if isinstance(info, types.StorageBillingEvent):
            cost["storage"] += event.estimated_cost_usd or 0.0
            continue
        tokens[f"{event.session_id}/{info.type}"] += info.token_count
        cost[f"{event.session_id}/{info.type}"] += event.estimated_cost_usd or 0.0
    storage = admin.get_current_checkpoint_storage_usage().result()
    metadata = {sid: s.user_metadata for sid, s in usage.sessions.items()}
    rest.set_checkpoint_ttl_from_tinker_path(path, None).result()
    return {
        "version": tinker.__version__,
        "expiry_seconds": (expiry - listed[0].time).total_seconds() if expiry else None,
        "tokens": tokens,
        "cost": cost,
        "kinds": sorted(kinds),
        "sessions": metadata,
        "storage": {
            "rate": storage.effective_rate_usd_per_gigabyte_month,
            "bytes": sum(item.size_bytes for item in storage.data),
            "checkpoints": sum(item.checkpoint_count for item in storage.data),
        },
    }


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:5])))
