"""What a registered model package names for serving, besides its image (`pipeline.sagemaker.images`): the content
types its handler takes and the response it writes (`steps.contract`), and the instance types it may be deployed on:
those of the planner's catalogue (steps/evaluate/catalogue.json) that botocore's model of SageMaker lists for
real-time endpoints and for batch transform: CPU types for the CPU image, the package's primary specification, and
GPU types for the framework's GPU image, its second (`gpu_specification`): one artefact, either image."""

from __future__ import annotations

import functools

from steps.contract import SERVING_ACCEPT, SERVING_CONTENT_TYPES
from steps.evaluate.catalogue import load_catalogue

GPU_SPECIFICATION = "gpu"  # the name of a package's GPU inference specification (CreateModel's InferenceSpecificationName)


def gpu_specification(primary: dict, image: str) -> dict:
    """A package's second inference specification (CreateModelPackage's AdditionalInferenceSpecifications): the
    primary's containers (its artefact) on the framework's GPU inference ``image``, for the catalogue's GPU types."""
    realtime, transform = serving_instance_types(gpu=True)
    return {
        "Name": GPU_SPECIFICATION,
        "Description": "the framework's GPU inference image, for GPU instance types",
        "Containers": [{**container, "Image": image} for container in primary["Containers"]],
        "SupportedContentTypes": list(SERVING_CONTENT_TYPES),
        "SupportedResponseMIMETypes": [SERVING_ACCEPT],
        "SupportedRealtimeInferenceInstanceTypes": realtime,
        "SupportedTransformInstanceTypes": transform,
    }


def serving_arguments(*, gpu: bool = False) -> dict:
    """The SDK's model package arguments (`get_model_package_args`) for the serving side of a package."""
    realtime, transform = serving_instance_types(gpu=gpu)
    return {
        "content_types": list(SERVING_CONTENT_TYPES),
        "response_types": [SERVING_ACCEPT],
        "inference_instances": realtime,
        "transform_instances": transform,
    }


@functools.cache
def serving_instance_types(*, gpu: bool = False) -> tuple[list[str], list[str]]:
    """(real-time, batch transform) instance types of the catalogue, with GPUs or without, in the catalogue's order."""
    import botocore.session

    model = botocore.session.get_session().get_service_model("sagemaker")
    realtime, transform = (set(model.shape_for(name).enum) for name in ("ProductionVariantInstanceType", "TransformInstanceType"))
    types = [spec.name for spec in load_catalogue().specs.values() if (spec.gpus > 0) == gpu]
    return [t for t in types if t in realtime], [t for t in types if t in transform]
