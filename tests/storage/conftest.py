"""Storage test fixtures: the moto S3 server, a client for it, a fresh bucket per test."""

from .s3_server import bucket, s3, s3_endpoint

__all__ = ["bucket", "s3", "s3_endpoint"]
