"""The new-session form: its fields only parse what people type; the API's wire types and the
control plane's services decide what is valid, and their errors land on the field they name."""

from __future__ import annotations

import re

from django import forms
from pydantic import ValidationError

from controlplane.audit.outcomes import note_failure
from controlplane.edge.errors import field_path
from controlplane.errors import DomainError
from controlplane.operations.replicas import replicas_number
from controlplane.training_sessions.services.lora import MAX_LORA_RANK, lora_checked
from loopwright.types import CreateSessionRequest, LoraConfig


def add_domain_error(form: forms.Form, exc: DomainError, fields: dict[str, str] | None = None):
    """Show a service's error on the form field it names (``fields`` maps the service's field
    names, or their prefixes, to the form's); else above the form."""
    note_failure(exc.detail)
    name = exc.field or ""
    target = None
    for prefix, field in (fields or {}).items():
        if name == prefix or name.startswith((prefix + ".", prefix + "[")):
            target = field
            break
    if target is None and name in form.fields:
        target = name
    # the label names the field already: "lora_config.rank: must be …" reads "must be …"
    detail = exc.detail.removeprefix(f"{name}: ") if target is not None and name else exc.detail
    form.add_error(target, detail)


# pydantic's wording for what people type into a box, said the way a form says it
PLAIN = {
    "extra_forbidden": "unknown field",
    "int_parsing": "a whole number, e.g. 32",
    "int_from_float": "a whole number, e.g. 32",
    "float_parsing": "a number, e.g. 16 or 0.5",
}


def wire_error(exc: ValidationError, prefix: str = "") -> DomainError:
    """A wire type's first validation error as the API words it: ``vpc_config.subnets[2]: …``."""
    first = exc.errors()[0]
    name = prefix + field_path(first.get("loc", ()))
    message = PLAIN.get(first.get("type", ""), first.get("msg", ""))
    return DomainError(f"{name}: {message}" if name else message, field=name or None)


def id_list(raw: str) -> list[str]:
    """``subnet-1, subnet-2`` or one a line → the ids, in order."""
    return [part for part in re.split(r"[\s,]+", raw or "") if part]


class SessionForm(forms.Form):
    """A training session with one LoRA model. Only the shape of the input is checked here."""

    # the service's field names (or their prefixes, most specific first) → this form's fields
    FIELDS = {
        "lora_config.rank": "rank",
        "lora_config.alpha": "alpha",
        "lora_config": "rank",
        "vpc_config.security_group_ids": "security_group_ids",
        "vpc_config.subnets": "subnets",
        "vpc_config": "subnets",
    }

    name = forms.CharField(
        label="Name", required=False, max_length=200, help_text="Optional; shown in lists."
    )
    base_model = forms.CharField(label="Base model", required=False, widget=forms.Select())
    rank = forms.CharField(
        label="LoRA rank",
        required=False,
        initial="32",
        help_text=f"Size of the adapter's low-rank matrices, 1 to {MAX_LORA_RANK}; empty means 32.",
        widget=forms.NumberInput(
            attrs={"min": 1, "max": MAX_LORA_RANK, "step": 1, "inputmode": "numeric"}
        ),
    )
    alpha = forms.CharField(
        label="LoRA alpha",
        required=False,
        help_text="Greater than 0; the update is scaled by alpha / rank. Empty means 32.",
        widget=forms.NumberInput(attrs={"min": 0, "step": "any", "inputmode": "decimal"}),
    )
    replicas = forms.CharField(
        label="Replicas",
        required=False,
        initial="1",
        help_text=(
            "Workers the model trains on at once, data parallel; at most your account's limit "
            "and the workers serving the base model. Empty means 1."
        ),
        widget=forms.NumberInput(attrs={"min": 1, "step": 1, "inputmode": "numeric"}),
    )
    role_arn = forms.CharField(
        label="Role ARN",
        required=False,
        help_text="The IAM role the session runs as; you need iam:PassRole on it.",
        widget=forms.TextInput(attrs={"list": "roles", "spellcheck": "false"}),
    )
    model_package_group_arn = forms.CharField(
        label="Model package group ARN",
        required=False,
        help_text="Every checkpoint becomes a version of this group (made on first save).",
        widget=forms.TextInput(attrs={"list": "groups", "spellcheck": "false"}),
    )
    kms_key_arn = forms.CharField(
        label="KMS key", required=False, widget=forms.Select(), help_text="Seals checkpoints."
    )
    subnets = forms.CharField(
        label="VPC subnets",
        required=False,
        help_text="Subnet ids, separated by commas or spaces; empty: any worker.",
        widget=forms.TextInput(attrs={"spellcheck": "false"}),
    )
    security_group_ids = forms.CharField(
        label="Security groups",
        required=False,
        help_text="Security group ids (needed with subnets).",
        widget=forms.TextInput(attrs={"spellcheck": "false"}),
    )
    s3_output_path = forms.CharField(
        label="S3 output path",
        required=False,
        help_text="Where checkpoints go, inside one of your storage locations; empty: local storage.",
        widget=forms.TextInput(attrs={"placeholder": "s3://bucket/prefix", "spellcheck": "false"}),
    )

    def __init__(self, *args, base_models=(), kms_keys=(), **kwargs) -> None:
        kwargs.setdefault("label_suffix", "")  # the labels are headings, not "Name:"
        super().__init__(*args, **kwargs)
        self.offer(base_models=base_models, kms_keys=kms_keys)

    def offer(self, *, base_models=(), kms_keys=()) -> None:
        """The base models and KMS keys its lists offer."""
        self.fields["base_model"].widget.choices = [(m, m) for m in base_models] or [
            ("", "No base model is served right now")
        ]
        self.fields["kms_key_arn"].widget.choices = [("", "The account's default key")] + [
            (k.arn, f"{k.alias or k.id} ({k.state})") for k in kms_keys
        ]

    def wire(self) -> tuple[CreateSessionRequest, LoraConfig, str, int]:
        """The API's request types built from the form (a DomainError naming the field if they
        refuse it), the base model and the replicas."""
        data = self.cleaned_data
        vpc = None
        if data["subnets"] or data["security_group_ids"]:
            vpc = {
                "subnets": id_list(data["subnets"]),
                "security_group_ids": id_list(data["security_group_ids"]),
            }
        session = {
            "tags": [],
            "sdk_version": "",
            "name": data["name"] or None,
            "role_arn": data["role_arn"].strip() or None,
            "model_package_group_arn": data["model_package_group_arn"].strip() or None,
            "s3_output_path": data["s3_output_path"].strip() or None,
            "kms_key_arn": data["kms_key_arn"] or None,
            "vpc_config": vpc,
        }
        try:
            request = CreateSessionRequest.model_validate(session)
        except ValidationError as exc:
            raise wire_error(exc) from None
        lora = {"rank": data["rank"].strip() or 32, "alpha": data["alpha"].strip() or None}
        lora_checked(_numbers(lora))  # as create_model does, with its words, before the types'
        try:
            config = LoraConfig.model_validate(lora)
        except ValidationError as exc:
            raise wire_error(exc, "lora_config.") from None
        replicas = replicas_number(_whole(data["replicas"].strip() or "1"))
        return request, config, data["base_model"], replicas


def _whole(typed: str) -> int | str:
    """What was typed as a whole number where it reads as one (else as typed, for the service
    to say what is wrong)."""
    try:
        return int(typed)
    except ValueError:
        return typed


def _numbers(lora: dict) -> dict:
    """The form's rank and alpha as numbers where they read as numbers (else left as typed, for
    the wire type to name what is wrong)."""
    out = dict(lora)
    for key, kind in (("rank", int), ("alpha", float)):
        try:
            out[key] = kind(lora[key]) if lora[key] is not None else None
        except (TypeError, ValueError):
            out.pop(key)
    return out
