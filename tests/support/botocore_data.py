"""One botocore data loader per search path for the whole test process, instead of one per boto3/botocore session.

Every botocore session parses its own copy of the JSON models it needs (endpoints, partitions, the SageMaker API: more
than half the CPU of a compile, which opens several sessions; the SageMaker SDK re-reads the endpoints for each image
it names), and the suite opens hundreds of sessions. A Loader is botocore's own cache of those files (it hands every
client of a session the same parsed objects): sharing it across sessions reads each file once, and changes no value
any session sees.
"""

from __future__ import annotations

import botocore.loaders
import botocore.session

_create_loader = botocore.loaders.create_loader
_loaders: dict[str | None, botocore.loaders.Loader] = {}


def _shared_loader(search_path_string: str | None = None) -> botocore.loaders.Loader:
    if search_path_string not in _loaders:  # AWS_DATA_PATH: another search path gets a loader of its own
        _loaders[search_path_string] = _create_loader(search_path_string)
    return _loaders[search_path_string]


def share_loaders() -> None:
    """Sessions created from now on, and the SDK's own endpoint lookups, take their loader from ``_loaders``."""
    botocore.session.create_loader = _shared_loader  # the name botocore.session imported
    botocore.loaders.create_loader = _shared_loader  # the SageMaker SDK's region and DNS-suffix lookups call it
