"""What step code's local stand-ins for AWS would have asked of AWS, noted for the local run's call ledger.

The local store and the local registry read and write files where the deployed step asks S3 and SageMaker; each notes
the call the real client makes (operation and the names it acts on) in the file ``$HETERO_AWS_CALLS``, which only the
local runner sets. The runner turns each note into the IAM action and ARN AWS would authorise (pipeline/iam/ledger.py).
Nothing is noted, and nothing is opened, where the variable is not set (in a SageMaker container).
"""

from __future__ import annotations

import json
import os

# set by the local runner only (pipeline/iam/calls.py): the file the notes go to
AWS_CALLS_ENV = "HETERO_AWS_CALLS"


def note(operation: str, **names: object) -> None:
    """One call: ``operation`` as ``service:Operation`` (``s3:PutObject``), ``names`` what it acts on: ``path`` for a
    local file that stands for an S3 object, ``group`` and ``version`` for a model package."""
    ledger = os.environ.get(AWS_CALLS_ENV)
    if not ledger:
        return
    with open(ledger, "a", encoding="utf-8") as out:
        out.write(json.dumps({"operation": operation, **{k: str(v) for k, v in names.items()}}) + "\n")
