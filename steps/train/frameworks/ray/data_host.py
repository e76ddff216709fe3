"""Every host of a Ray job but the head (the data hosts, and with several trainer hosts the others): a Ray node, and
the control link to the head.

Ray has no notion of "the job is over" for the nodes that joined it, so such a host admits the head's
authenticated control link (`steps.train.dataplane.session`, as a data host of the other frameworks admits its
trainers), starts its Ray node once the head's START says where to join, and waits: the head ends the job with
STOP carrying its results (or the reason it failed); a head that goes silent or drops the link without STOP, or
this host's Ray node stopping, ends this host non-zero naming it.
"""

from __future__ import annotations

import socket

from steps.train.core.cluster import Cluster, resolve
from steps.train.core.config import TrainConfig
from steps.train.dataplane import messages
from steps.train.dataplane.auth import job_secret
from steps.train.dataplane.session import HostSession
from steps.train.dataplane.settings import DataPlaneSettings
from steps.train.frameworks.ray.errors import RayNodeFailed
from steps.train.frameworks.ray.node import RayNode


def follow(cfg: TrainConfig, cluster: Cluster, node: RayNode) -> None:
    me, head = cluster.current_host, node.head_host
    joins: list[str] = []  # the head's Ray address, from its START

    def on_message(trainer, message) -> None:
        if isinstance(message, messages.Start):
            joins.append(message.require("ray"))

    def ready() -> bool:
        """The Ray node started once the head says where, and watched: its end while the head trains fails this host."""
        if node.process is not None and not node.alive():
            raise RayNodeFailed(f"host {me}'s Ray node stopped (its log is above) while the head {head} trains")
        if joins and node.process is None:
            node.start(joins[0])
        return session.all_stopped

    with socket.create_server((resolve(me), cfg.data_port), backlog=16) as server:
        session = HostSession.admit(
            DataPlaneSettings.of(cfg),
            server,
            me=me,
            trainer_hosts=(head,),
            secret=job_secret(),
            info={"framework": "ray", "epochs": cfg.epochs},
            who=f"host {me}",
            results_dir=cluster.model_dir,
            on_message=on_message,
        )
    with session:
        session.wait_until(ready)
    print(f"[ray] {me}: the head {head} ended the job; exiting", flush=True)
