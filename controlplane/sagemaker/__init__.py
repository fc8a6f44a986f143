"""The SageMaker control plane face at ``<base>/sagemaker``: AWS JSON 1.1 (``X-Amz-Target:
SageMaker.<Op>``), signed with SigV4, for boto3's ``sagemaker`` client and ``sagemaker-train``:
the training-session operations, the model package registry operations the SDK calls, and the
Public Hub look-ups, over the same services as the Tinker face."""
