from django.apps import AppConfig


class TrainingSessionsConfig(AppConfig):
    name = "controlplane.training_sessions"
    label = "training_sessions"
