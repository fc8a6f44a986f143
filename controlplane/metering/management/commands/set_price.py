"""Set the price per million tokens of a meter, for one base model or any, from a date on."""

from __future__ import annotations

from datetime import UTC, date, datetime, time
from decimal import Decimal, InvalidOperation

from django.core.management.base import BaseCommand, CommandError

from controlplane.errors import DomainError
from controlplane.metering.models import ANY_BASE_MODEL, Meter
from controlplane.metering.services import price_set


def _when(raw: str) -> datetime:
    try:
        if "T" in raw or " " in raw:
            value = datetime.fromisoformat(raw)
            return value if value.tzinfo else value.replace(tzinfo=UTC)
        return datetime.combine(date.fromisoformat(raw), time.min, tzinfo=UTC)
    except ValueError:
        raise CommandError(f"--from: an ISO date or date-time, not {raw!r}") from None


class Command(BaseCommand):
    help = "Set a price: set_price --base-model X --meter train_tokens --per-million 0.40 --from 2026-12-01"

    def add_arguments(self, parser) -> None:
        parser.add_argument("--base-model", default=ANY_BASE_MODEL, help="a base model, or * (any)")
        parser.add_argument("--meter", required=True, choices=Meter.values)
        parser.add_argument("--per-million", required=True, help="decimal price per 1M tokens")
        parser.add_argument("--from", dest="effective_from", required=True, help="UTC date")
        parser.add_argument("--currency", default="usd")

    def handle(self, *args, **opts) -> None:
        try:
            price = Decimal(opts["per_million"])
        except InvalidOperation:
            raise CommandError("--per-million: a decimal number") from None
        try:
            point = price_set(
                base_model=opts["base_model"],
                meter=opts["meter"],
                per_million=price,
                effective_from=_when(opts["effective_from"]),
                currency=opts["currency"],
            )
        except DomainError as exc:
            raise CommandError(exc.detail) from None
        self.stdout.write(str(point))
