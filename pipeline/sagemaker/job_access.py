"""What the deployed pipeline's jobs may read in S3, carried in the pipeline's description.

The stack scopes the job role (`infra.job_role`) to two key prefixes of the artifact bucket: the raw
inputs (`hetero:inputPrefix`, read only) and the pipeline's own artifacts (`hetero:prefix`). It writes
both into the pipeline's description, which DescribePipeline returns, so `hetero start` can refuse an
S3 URI the jobs could not read before an execution starts (a Shard job denied its input fails after
minutes) with no other call or permission.

    >>> access = JobAccess(inputs="s3://b/hetero/raw/", artifacts="s3://b/hetero/")
    >>> JobAccess.from_description("Shard -> ... " + access.describe()) == access
    True
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from steps.common.errors import UserError

INPUT_PREFIX_SETTING = "hetero:inputPrefix"  # the deploy setting (cdk.json context) that moves the inputs' prefix
_SENTENCE = "Jobs read inputs under {inputs} and their artifacts under {artifacts}."
_PARSE = re.compile(
    re.escape(_SENTENCE).replace(r"\{inputs\}", r"(?P<inputs>s3://\S+/)").replace(r"\{artifacts\}", r"(?P<artifacts>s3://\S+/)")
)


@dataclass(frozen=True)
class JobAccess:
    inputs: str  # s3://<bucket>/<input prefix>, ending in '/': the jobs read it, never change it
    artifacts: str  # s3://<bucket>/<prefix>/: the jobs read and write it

    def describe(self) -> str:
        return _SENTENCE.format(inputs=self.inputs, artifacts=self.artifacts)

    @classmethod
    def from_description(cls, description: str | None) -> JobAccess | None:
        """None when the description does not say (a pipeline deployed some other way)."""
        match = _PARSE.search(description or "")
        return cls(inputs=match["inputs"], artifacts=match["artifacts"]) if match else None

    def readable(self, uri: str) -> bool:
        folder = uri.rstrip("/") + "/"  # s3://b/hetero/raw names the folder s3://b/hetero/raw/
        return folder.startswith((self.inputs, self.artifacts))

    def require_readable(self, name: str, uri: str) -> None:
        """UserError naming what the jobs may read and how to widen it, unless they may read ``uri``."""
        if self.readable(uri):
            return
        fix = {"PriceOverrides": f"pass the file with --prices FILE (hetero start uploads it under {self.artifacts})"}.get(
            name,
            f"copy the data under {self.inputs}, or redeploy with another input prefix of that bucket "
            f"(npx cdk deploy -c {INPUT_PREFIX_SETTING}=<prefix>/)",
        )
        raise UserError(
            f"parameter {name}={uri!r}: the pipeline's jobs may read only {self.inputs} (inputs) and "
            f"{self.artifacts} (the pipeline's artifacts): {fix}",
            headline="bad parameter",
        )
