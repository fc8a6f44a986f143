"""Forms of the dashboard's resource pages: Django forms parse the request, the control plane's
services validate, and a service's ``DomainError`` lands next to the field it names."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

from django import forms
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from controlplane.audit.outcomes import note_failure
from controlplane.errors import DomainError

T = TypeVar("T")

# Input a form can fix: bad input (400) or a clash with what exists (409). Anything else (403,
# 404, 429, 503) is an answer about the page, shown as an error page.
FIXABLE = (400, 409)
_HEAD = re.compile(r"[.\[]")


class Form(forms.Form):
    """Renders as ``form.stacked`` rows: label, hint, errors (the input is described by both),
    input; errors that name no field go on top as an alert."""

    id_prefix = ""  # e.g. "subnet": ids "subnet_name", for two forms with one field name

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("label_suffix", "")
        if self.id_prefix:
            kwargs.setdefault("auto_id", f"{self.id_prefix}_%s")
        super().__init__(*args, **kwargs)
        self.error_paths: dict[str, str] = {}

    def as_rows(self) -> SafeString:
        top = format_html_join(
            "", '<p class="problem" role="alert">{}</p>', ((e,) for e in self.non_field_errors())
        )
        hidden = format_html_join("", "{}", ((str(f),) for f in self.hidden_fields()))
        rows = format_html_join("", "{}", ((row(f),) for f in self.visible_fields()))
        return mark_safe(top + hidden + rows)  # noqa: S308 — joined from format_html output, which escapes

    __str__ = __html__ = as_rows  # what {{ form }} shows (``render`` draws labels too)

    def add_domain_error(self, exc: DomainError) -> None:
        """Put a service's error on the field it names (``document.Statement[0]`` → document),
        or on top of the form when it names none of the form's fields."""
        note_failure(exc.detail)
        name = exc.field or ""
        head = _HEAD.split(name, maxsplit=1)[0]
        if head not in self.fields:
            self.add_error(None, exc.detail)
            return
        # where in the field the error is (``Statement[0].Action``), for an editor to mark
        self.error_paths[head] = name[len(head) :].lstrip(".")
        # the label names the field: "name: too long" reads "too long" under it, and
        # "document.Statement[0].Action: …" reads "Statement[0].Action: …"
        detail = exc.detail.removeprefix(f"{head}: ") if name == head else exc.detail
        self.add_error(head, detail.removeprefix(f"{head}."))


def row(field: forms.BoundField) -> SafeString:
    hint = ""
    if field.help_text:
        hint = format_html(
            '<div class="hint" id="{}_helptext">{}</div>', field.auto_id, field.help_text
        )
    return format_html(
        '<div class="row">{}{}{}{}</div>', field.label_tag(), hint, field.errors, str(field)
    )


def fixable(form: forms.Form, exc: DomainError) -> bool:
    """Whether ``exc`` is about input the form can fix: bad input, a clash, or something the
    form's own field names that is not there (a role, a key): the form again, not an error
    page."""
    if exc.status in FIXABLE:
        return True
    return exc.status == 404 and _HEAD.split(exc.field or "", maxsplit=1)[0] in form.fields


def submit(form: Form, call: Callable[[dict], T]) -> T | None:
    """``call(cleaned_data)`` when the form is valid; None when it is not or the service refused
    the input (the reason is then on the form, answered 400). Other domain errors go to the
    error page."""
    if not form.is_valid():
        return None
    try:
        return call(form.cleaned_data)
    except DomainError as exc:
        if not fixable(form, exc):
            raise
        form.add_domain_error(exc)
        return None


def code_area(rows: int = 14) -> forms.Textarea:
    """A monospace textarea for JSON documents."""
    return forms.Textarea(
        attrs={"rows": rows, "class": "code", "spellcheck": "false", "autocapitalize": "off"}
    )


def page_number(raw: str | None) -> int:
    """A 1-based page number from a query parameter (anything odd is page 1)."""
    try:
        return max(1, min(int(raw or 1), 10**6))
    except ValueError:
        return 1
