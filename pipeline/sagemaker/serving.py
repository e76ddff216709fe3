"""What a registered model package names for serving, besides its image (`pipeline.sagemaker.images`): the content
types its handler takes and the response it writes (`steps.contract`), and the instance types it may be deployed on:
those of the planner's catalogue (steps/evaluate/catalogue.json) that botocore's model of SageMaker lists for
real-time endpoints and for batch transform, CPU types for the CPU image (a GPU image would take the GPU types)."""

from __future__ import annotations

import functools

from steps.contract import SERVING_ACCEPT, SERVING_CONTENT_TYPES
from steps.evaluate.catalogue import load_catalogue


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
