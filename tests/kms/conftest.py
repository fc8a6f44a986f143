"""KMS test fixtures: the moto KMS server and a boto3 client for it."""

from .aws_server import endpoint, kms

__all__ = ["endpoint", "kms"]
