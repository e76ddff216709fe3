"""Where AWS publishes its Deep Learning Containers: region -> the registry account that holds them there.

Copied from aws/deep-learning-containers, docs/reference/region_availability.md ("Deep Learning
Containers" table, last changed 2026-08-10): 36 regions. The SageMaker SDK's image tables
(sagemaker/core/image_uri_config/<framework>.json) list 9 more for the same images (us-gov-east-1,
us-gov-west-1, the us-iso*/eu-isoe regions, eusc-de-east-1, me-west-1) that AWS's own list leaves
out, and a newer version may list fewer (PyTorch 2.14: no China regions): an image is taken to exist
in a region when both list it (`pipeline.sagemaker.images.image_regions`). Where both list a region they name
the same account.
"""

DLC_REGISTRIES = {
    "us-east-1": "763104351884",
    "us-east-2": "763104351884",
    "us-west-1": "763104351884",
    "us-west-2": "763104351884",
    "af-south-1": "626614931356",
    "ap-east-1": "871362719292",
    "ap-east-2": "975050140332",
    "ap-northeast-1": "763104351884",
    "ap-northeast-2": "763104351884",
    "ap-northeast-3": "364406365360",
    "ap-south-1": "763104351884",
    "ap-south-2": "772153158452",
    "ap-southeast-1": "763104351884",
    "ap-southeast-2": "763104351884",
    "ap-southeast-3": "907027046896",
    "ap-southeast-4": "457447274322",
    "ap-southeast-5": "550225433462",
    "ap-southeast-6": "633930458069",
    "ap-southeast-7": "590183813437",
    "ca-central-1": "763104351884",
    "ca-west-1": "204538143572",
    "cn-north-1": "727897471807",
    "cn-northwest-1": "727897471807",
    "eu-central-1": "763104351884",
    "eu-central-2": "380420809688",
    "eu-north-1": "763104351884",
    "eu-south-1": "692866216735",
    "eu-south-2": "503227376785",
    "eu-west-1": "763104351884",
    "eu-west-2": "763104351884",
    "eu-west-3": "763104351884",
    "il-central-1": "780543022126",
    "me-central-1": "914824155844",
    "me-south-1": "217643126080",
    "mx-central-1": "637423239942",
    "sa-east-1": "763104351884",
}
