"""What the SageMaker API says of a session beyond the session itself: the name, base model ARN
and output path it was created with, and whether it was deleted (``DeleteTrainingSession``
takes it out of the SageMaker API and frees its name; the session, its checkpoints, packages
and usage stay, and the dashboard and the Tinker API still show it)."""

from __future__ import annotations

from django.db import models

from controlplane.training_sessions.models import Session


class TrainingSessionRecord(models.Model):
    session = models.OneToOneField(
        Session, on_delete=models.CASCADE, primary_key=True, related_name="sagemaker"
    )
    name = models.CharField(max_length=63, blank=True)  # as created; empty: made elsewhere
    base_model_arn = models.CharField(max_length=2048, blank=True)
    output_path = models.CharField(max_length=1024, blank=True)  # as given, even if not S3 here
    created_by = models.CharField(max_length=400, blank=True)
    deleted_at = models.DateTimeField(null=True, blank=True)
    deleted_by = models.CharField(max_length=400, blank=True)

    class Meta:
        indexes = [models.Index(fields=["name"], name="sagemaker_session_name")]

    def __str__(self) -> str:
        return self.name or self.session_id
