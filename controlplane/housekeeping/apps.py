from django.apps import AppConfig


class HousekeepingConfig(AppConfig):
    name = "controlplane.housekeeping"
    label = "housekeeping"
