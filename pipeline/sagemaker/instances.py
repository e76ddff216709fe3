"""What SageMaker gives an instance type beyond its price: the NVMe instance store it mounts instead of an EBS volume.

Read by the request checks (`pipeline.sagemaker.validation`: a processing job may not ask for more) and by the
emulator, which sizes each host's volume as SageMaker does (`pipeline.emulator.job.volumes`).
"""

from __future__ import annotations


def instance_storage_gb(instance_type: str) -> int:
    """The NVMe instance store of ``instance_type`` (0: EBS only, or a type the instance catalogue does not list)."""
    from steps.evaluate.catalogue import load_catalogue

    spec = load_catalogue().specs.get(instance_type)
    return spec.instance_storage_gb if spec else 0
