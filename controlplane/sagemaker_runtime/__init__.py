"""The SageMaker training-session runtime face at ``/sagemaker-runtime``: botocore's
``sagemakertrainingsessionruntime`` service (REST-JSON, SigV4) over the same sessions, operations,
metering, IAM decisions and audit log as the Tinker and OpenAI faces."""
