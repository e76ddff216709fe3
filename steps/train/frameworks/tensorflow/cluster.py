"""What both roles of the TensorFlow path read from the cluster: the one-trainer
limit and this host's share of the TFRecord shards.

The data hosts (`steps.train.frameworks.tensorflow.data_host`) and the trainer
(`steps.train.frameworks.tensorflow.trainer`, whose homogeneous baseline reads its own shards
in-process) check and select the same way, so the numbers they exchange agree.
"""

from __future__ import annotations

from pathlib import Path

from steps.common.errors import UserError
from steps.formats.tfrecord import list_tfrecord_shards
from steps.frameworks import framework
from steps.train.core.cluster import Cluster
from steps.train.core.manifest import read_manifest, train_channel


def check_single_trainer(cluster: Cluster) -> None:
    """The job-level twin of `pipeline.graph.Graph.check_parameters`, for jobs started outside the pipeline."""
    limit = framework("tensorflow").max_trainer_hosts
    if limit is not None and len(cluster.trainer_hosts) > limit:
        raise UserError(
            f"the TensorFlow path trains on one host ({len(cluster.trainer_hosts)} given: {', '.join(cluster.trainer_hosts)}); "
            "it uses every GPU of that host (MirroredStrategy). Set DnnInstanceCount=1 (--dnn-hosts 1), or use --framework pytorch "
            "for several trainer hosts",
            headline="unsupported cluster shape",
        )


def local_shards(cluster: Cluster, hosts: tuple[str, ...], wait_s: float) -> tuple[list[Path], int]:
    """This host's TFRecord shards and their sample count (from the shard step's manifest);
    ``hosts`` share the train channel."""
    channel = train_channel(cluster, wait_s)
    shards = list_tfrecord_shards(channel)
    if not shards:
        raise UserError(
            f"host {cluster.current_host} found no *.tfrecord shards in {channel}; the TensorFlow path "
            "reads the shard step's TFRecord output (shard with --format tfrecord)",
            headline="no shards",
        )
    index, count = cluster.part("train", hosts)
    mine = shards[index::count]  # FullyReplicated: whole files per host (the shard step makes a multiple of the hosts)
    counts = shard_counts(cluster)
    unknown = [p.name for p in mine if p.name not in counts]
    if unknown:
        raise UserError(
            f"shards {', '.join(unknown[:5])} in {channel} are not in the manifest; the train and manifest channels "
            "must come from the same shard step run",
            headline="manifest mismatch",
        )
    return mine, sum(counts[p.name] for p in mine)


def shard_counts(cluster: Cluster) -> dict[str, int]:
    """Samples per training shard (by file name), from the shard step's manifest."""
    return {
        Path(s["name"]).name: int(s["samples"]) for s in read_manifest(cluster.channel("manifest"))["splits"]["train"]["shards"]
    }
