"""A model package version as an HTTP download (a streamed .tar.gz), for the API and the
dashboard alike: the caller's view authorizes the download; this checks ``kms:Decrypt`` on the
checkpoint's key through ``authorize`` and builds the response."""

from __future__ import annotations

from collections.abc import Callable

from django.http import StreamingHttpResponse

from . import downloads
from .models import ModelPackage


def package_download_response(
    *,
    package: ModelPackage,
    format: str,
    include_optimizer: bool,
    field: str,
    authorize: Callable[[str, str], None],
    actor: str,
) -> StreamingHttpResponse:
    """The version as a .tar.gz; the caller must also be allowed to decrypt with its key."""
    plan = downloads.download_plan(
        package=package, format=format, include_optimizer=include_optimizer, field=field
    )
    if plan.key_arn:
        authorize("kms:Decrypt", plan.key_arn)
    archive = downloads.archive_build(plan, actor=actor)
    try:
        response = StreamingHttpResponse(archive, content_type="application/gzip")
        response["Content-Disposition"] = f"attachment; filename={plan.filename}"
        response["Content-Length"] = str(archive.size)
        if package.sha256:
            response["X-Loopwright-Manifest-Sha256"] = package.sha256
    except BaseException:
        archive.close()  # the response will never end, so its scratch folder goes now
        raise
    return response
