"""The step code (`steps/` and the user's code folders, `pipeline.code`) as a tar.gz asset: SageMaker script mode
downloads `sagemaker_submit_directory` and expects a tar.gz (directory assets are zipped); `pipeline.code` packs it
deterministically."""

from __future__ import annotations

from pathlib import Path

from aws_cdk import Stage
from aws_cdk import aws_s3_assets as s3_assets
from constructs import Construct

from pipeline.code import STEPS_DIR, build_code_tarball, requirements_file
from pipeline.local.requirements import Offline, image_python, refuse_networked


class TrainingCode(Construct):
    """`s3_url`: where SageMaker finds the code (`sagemaker_submit_directory`, or under network isolation the `code`
    channel, whose file name the definition needs: so the URL is built from the asset's object key, which is known at
    synth time, not taken from `s3_object_url`, one opaque token). `code_dirs`: folders whose contents ship at the
    code's root. `offline`: why the training jobs (which run `training_image`) have no route to a package index
    (network isolation, FSx's subnets without NAT); with any, a requirements.txt among the folders that would need the
    network is refused at synth time."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        source: Path = STEPS_DIR,
        code_dirs: tuple[Path, ...] = (),
        training_image: str = "",
        offline: tuple[Offline, ...] = (),
    ) -> None:
        super().__init__(scope, construct_id)
        tarball = build_code_tarball(
            source=source, code_dirs=code_dirs, destination=Path(Stage.of(self).outdir) / "hetero-build" / "code.tar.gz"
        )
        if offline and (requirements := requirements_file(code_dirs)):
            refuse_networked(tarball, python=image_python(training_image), origin=str(requirements), offline=offline)
        self.asset = s3_assets.Asset(self, "Archive", path=str(tarball))
        self.s3_url = f"s3://{self.asset.s3_bucket_name}/{self.asset.s3_object_key}"
