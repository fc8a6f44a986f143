"""How values read on the dashboard: one money format, rounded numbers, tokens with thousands
separators, durations, human meter names, and a dash for nothing (never ``None``)."""

from __future__ import annotations

import math
import re
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

from controlplane.metering.models import Meter

COST_PLACES = Decimal("0.000001")  # the exact fraction of a cent, as the API reports it
NOTHING = "—"
METER_NAMES = {
    Meter.TRAIN_TOKENS: "Training tokens",
    Meter.FORWARD_TOKENS: "Forward tokens",
    Meter.PREFILL_TOKENS: "Prompt tokens (sampling)",
    Meter.SAMPLED_TOKENS: "Sampled tokens",
    Meter.STORAGE_GB_MONTHS: "Checkpoint storage",
}
METER_HINTS = {
    Meter.TRAIN_TOKENS: "every datum's input to forward_backward",
    Meter.FORWARD_TOKENS: "every datum's input to forward",
    Meter.PREFILL_TOKENS: "the prompt of a sample request, once",
    Meter.SAMPLED_TOKENS: "the tokens of every sequence a sample returns",
    Meter.STORAGE_GB_MONTHS: "checkpoints kept, in millionths of a GB-month",
}


def usd(amount: Decimal | str | float | int | None) -> str:
    """Money, the one way the dashboard writes it: ``$1,234.50``; an amount below a cent keeps
    its exact fraction (``$0.000625``), up to six decimal places."""
    if amount is None or amount == "":
        return NOTHING
    try:
        value = Decimal(str(amount)).quantize(COST_PLACES, rounding=ROUND_HALF_UP)
    except InvalidOperation:
        return str(amount)
    sign = "-" if value < 0 else ""
    whole, fraction = f"{abs(value):,.6f}".split(".")
    return f"{sign}${whole}.{fraction.rstrip('0').ljust(2, '0')}"


def tokens(n: int | float | None) -> str:
    return NOTHING if n is None else f"{int(n):,}"


def number(value: object, digits: int = 4) -> str:
    """A measured number, rounded for people: 15.993757247924805 → 15.99, 0.000123 → 0.000123,
    12345.6 → 12,346; whole numbers as they are; nothing as a dash."""
    if value is None or value == "":
        return NOTHING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if not isinstance(value, float | Decimal):
        return str(value)
    value = float(value)
    if not math.isfinite(value):
        return str(value)
    if value == int(value) and abs(value) < 1e15:
        return f"{int(value):,}"
    if abs(value) >= 10 ** (digits - 1):
        return f"{value:,.0f}"
    return f"{float(f'{value:.{digits}g}'):g}" if abs(value) >= 1e-4 else f"{value:.3g}"


def seconds(value: float | None) -> str:
    """0.42 s, 4.2 s, 95 s, 3 min 10 s."""
    if value is None:
        return NOTHING
    if value < 0.001:
        return "under 1 ms"
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 10:
        return f"{value:.1f} s"
    if value < 120:
        return f"{value:.0f} s"
    minutes, rest = divmod(round(value), 60)
    return f"{minutes} min {rest} s" if rest else f"{minutes} min"


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def meter_name(meter: str) -> str:
    return METER_NAMES.get(meter, meter.replace("_", " "))


_WORD = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|_")


def label(value: object) -> str:
    """A stored value in words: ``PendingManualApproval`` → "Pending manual approval",
    ``PendingDeletion`` → "Pending deletion", ``training_state`` → "Training state"."""
    if value is None or value == "":
        return NOTHING
    words = _WORD.sub(" ", str(value)).split()
    text = " ".join(w if w.isupper() and len(w) > 1 else w.lower() for w in words)
    return text[:1].upper() + text[1:]


def storage(uri: str | None) -> str:
    """Where a checkpoint's files are, as its owner may see it: their own bucket's URI; the
    service's own storage is not described (its folders are the server's business)."""
    if not uri:
        return NOTHING
    if uri.startswith("s3://"):
        return uri
    return "The service’s own storage"
