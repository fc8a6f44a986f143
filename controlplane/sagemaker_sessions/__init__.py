"""What both SageMaker faces (the control plane at ``/sagemaker`` and the runtime at
``/sagemaker-runtime``) share over the one set of services: a training session as SageMaker
names and reports it (``selectors``: by name or id, its status, usage and last sequence number),
its creation, stop and deletion (``services``), the Public Hub's view of the base models the
workers serve (``hub``), and botocore's service models as the check of every request and answer
(``shapes``, ``paging``)."""
