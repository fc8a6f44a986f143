"""The dashboard (server-rendered Django, a little plain JavaScript): accounts, the overview,
sessions, the registry, IAM, KMS, VPC, billing, budgets and the audit log, one URL module per
section under ``web.pages`` (mounted by ``web/urls.py``), with their templates, forms, SVG
charts and static files."""
