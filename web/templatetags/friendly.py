"""Template filters for friendly values: ``{{ cost|usd }}``, ``{{ n|tokens }}``,
``{{ loss|number }}``, ``{{ meter|meter_name }}``, ``{{ s|seconds }}``, ``{{ status|label }}``,
``{{ uri|storage }}``."""

from __future__ import annotations

from django import template

from .. import values

register = template.Library()
register.filter("usd", values.usd)
register.filter("tokens", values.tokens)
register.filter("number", values.number)
register.filter("meter_name", values.meter_name)
register.filter("seconds", values.seconds)
register.filter("label", values.label)
register.filter("storage", values.storage)
