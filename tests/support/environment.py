"""What the sagemaker-training toolkit's ``Environment`` tells a host, built from groups of hosts."""

from __future__ import annotations


class FakeEnv:
    """The attributes of ``sagemaker_training.environment.Environment`` that `Cluster.from_environment` reads.
    ``groups``: group name -> (instance type, hosts)."""

    def __init__(self, current_host, groups, current_group="homogeneousCluster"):
        self.current_host = current_host
        self.instance_groups_dict = {
            n: {"instance_group_name": n, "instance_type": t, "hosts": h} for n, (t, h) in groups.items()
        }
        self.current_instance_group = current_group
        self.current_instance_type = "ml.m5.xlarge"
        self.hosts = sorted(h for _, hs in groups.values() for h in hs)
        self.channel_input_dirs, self.input_data_config = {}, {}
        self.model_dir, self.output_dir, self.output_data_dir = "/m", "/o", "/o/data"
        self.network_interface_name = "eth0"
