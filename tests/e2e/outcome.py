"""What a seeded loop ended with, read back from the service: its final adapter and AdamW state
(a downloaded package) and the tokens its session was billed; and how two such states differ."""

from __future__ import annotations

from pathlib import Path

import httpx
import torch
from safetensors.torch import load_file

from .stack import Stack


def state_of(folder: Path) -> dict[str, torch.Tensor]:
    """A downloaded package's adapter (``a/…``) and AdamW state (``o/…``)."""
    state = {f"a/{k}": v for k, v in load_file(folder / "adapter_model.safetensors").items()}
    state |= {f"o/{k}": v for k, v in load_file(folder / "optimizer.safetensors").items()}
    return state


def usage(stack: Stack, session_id: str, who: str = "alice") -> dict[str, int]:
    """The session's billed quantity per meter, as its tenant ``who`` reads it."""
    r = httpx.get(
        f"{stack.url}/api/v1/sessions/{session_id}/usage",
        headers={"X-API-Key": stack.keys[who]},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    return {line["meter"]: line["quantity"] for line in r.json()["lines"]}


def differences(state: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]) -> list[str]:
    """The tensors of ``state`` not equal bit for bit to ``reference``'s (one machine, the same
    kernels: a loop that lost nothing and ran nothing twice ends with the same bits)."""
    if state.keys() != reference.keys():
        return sorted(state.keys() ^ reference.keys())
    return [k for k in state if not torch.equal(state[k], reference[k])]
