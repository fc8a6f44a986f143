"""Access keys and SigV4: what both SageMaker faces authenticate with.

Entry point: ``controlplane.access_keys.authentication.caller_of(request, *, service="sagemaker",
unsigned_payload=False, required_headers=())`` returns a ``Caller`` (``.principal``: the IAM
``Principal`` the key acts as; ``.key``: its ``AccessKey``) or raises ``SigV4Error`` (an
``aws_errors.AwsError``: ``.code`` such as ``UnrecognizedClientException``, ``.message``,
``.status``), which ``aws_errors.aws_error_response(error)`` renders in AWS's JSON shape
(``__type``, ``message``, ``x-amzn-ErrorType``). DRF views use ``SigV4Authentication`` instead
(it raises ``SigV4Failed``, holding the ``SigV4Error`` as ``.error``). Keys are made and revoked
by ``services.access_key_create`` / ``access_key_revoke``.
"""
