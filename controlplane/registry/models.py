"""Model package groups of a tenant (``model-package-group/<name>``) and their versions
(``model-package/<group>/<version>``, one per saved checkpoint, numbered 1, 2, 3 … per group)."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from controlplane.tenants.models import Tenant
from controlplane.training_sessions.models import Checkpoint


class ModelPackageGroup(models.Model):
    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(
        Tenant, on_delete=models.CASCADE, related_name="model_package_groups"
    )
    name = models.CharField(max_length=63)
    description = models.TextField(blank=True)
    tags = models.JSONField(default=list)  # [{"key": ..., "value": ...}]
    latest_version = models.PositiveIntegerField(default=0)  # numbers are never reused
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.CharField(max_length=400)  # the creator's ARN

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="uniq_package_group_name"),
        ]
        indexes = [models.Index(fields=["tenant", "-created_at"], name="package_group_recent")]

    def __str__(self) -> str:
        return self.name


class ModelPackage(models.Model):
    """One version of a group: what was saved, from which run and step, and its approval."""

    class Kind(models.TextChoices):
        TRAINING_STATE = "training_state"
        SAMPLER_WEIGHTS = "sampler_weights"
        MERGED = "merged"

    class Approval(models.TextChoices):
        PENDING = "PendingManualApproval"
        APPROVED = "Approved"
        REJECTED = "Rejected"

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="model_packages")
    group = models.ForeignKey(ModelPackageGroup, on_delete=models.CASCADE, related_name="packages")
    version = models.PositiveIntegerField()
    kind = models.CharField(max_length=16, choices=Kind.choices)
    base_model = models.CharField(max_length=200)
    lora = models.JSONField(default=dict)
    session_id = models.CharField(max_length=64, blank=True)
    model_id = models.CharField(max_length=64, blank=True)
    step = models.IntegerField(null=True, blank=True)  # the save's seq_id
    metrics = models.JSONField(default=dict)
    tinker_path = models.CharField(max_length=500)
    # None once the checkpoint expires, is deleted or is overwritten by a later save
    checkpoint = models.ForeignKey(
        Checkpoint, null=True, blank=True, on_delete=models.SET_NULL, related_name="packages"
    )
    storage_uri = models.CharField(max_length=2048, blank=True)
    sha256 = models.CharField(max_length=64, blank=True)
    size_bytes = models.BigIntegerField(null=True, blank=True)
    kms_key_arn = models.CharField(max_length=200, blank=True)
    approval_status = models.CharField(
        max_length=32, choices=Approval.choices, default=Approval.PENDING
    )
    approval_description = models.TextField(blank=True)
    approval_updated_by = models.CharField(max_length=400, blank=True)
    approval_updated_at = models.DateTimeField(null=True, blank=True)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.CharField(max_length=400)  # the session's role, or the caller
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["group", "version"], name="uniq_package_version"),
            models.CheckConstraint(
                condition=Q(approval_status__in=["PendingManualApproval", "Approved", "Rejected"]),
                name="package_approval_valid",
            ),
        ]
        indexes = [
            models.Index(fields=["group", "-version"], name="package_newest"),
            models.Index(fields=["tenant", "tinker_path"], name="package_by_path"),
            models.Index(fields=["expires_at"], name="package_expiry"),
        ]

    def __str__(self) -> str:
        return f"{self.group.name}/{self.version}"


class ExternalUpload(models.Model):
    """Weights made elsewhere, uploaded into the account as a sampler checkpoint (tinker 0.39's
    ``external_weights_upload_start`` / ``_finish``): what the upload will become (its model id,
    checkpoint path and where its files go, sealed with the account's key) and the files taken
    so far (name → the sealed object's size and sha256)."""

    id = models.CharField(primary_key=True, max_length=64)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    actor = models.CharField(max_length=400)  # who started it (the caller's ARN)
    base_model = models.CharField(max_length=200)
    lora = models.JSONField()
    model_id = models.CharField(max_length=64)  # the training run the checkpoint will belong to
    tinker_path = models.CharField(max_length=500)
    storage_uri = models.CharField(max_length=2048)  # where the finished checkpoint's files go
    sealing = models.JSONField()  # key and encryption context, as a save's
    files = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    checkpoint = models.OneToOneField(
        "training_sessions.Checkpoint", null=True, blank=True, on_delete=models.SET_NULL
    )


class RetentionRule(models.Model):
    """Which versions of a group keep their weights: the newest ``keep_last`` (None: all), and
    approved ones unless ``keep_approved`` is off. Older weights are deleted from storage."""

    group = models.OneToOneField(
        ModelPackageGroup, on_delete=models.CASCADE, related_name="retention"
    )
    keep_last = models.PositiveIntegerField(null=True, blank=True)
    keep_approved = models.BooleanField(default=True)
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.CharField(max_length=400, blank=True)
