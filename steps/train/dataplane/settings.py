"""What the data plane is told: its port and its clocks, nothing else of the training configuration.

The framework code builds it at the edge from the `TrainConfig` (`DataPlaneSettings.of(cfg)`); admission, the host
session and the trainer's watch take it, so the data plane reads no hyperparameter it does not need.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from steps.train.core.config import TrainConfig


@dataclass(frozen=True)
class DataPlaneSettings:
    data_port: int  # where a data host (or a Ray host) listens for its trainers
    connect_timeout_s: float  # how long peers may take to come up and answer
    silence_timeout_s: float  # a peer silent this long is gone
    heartbeat_s: float  # the keep-alive interval on every link

    @classmethod
    def of(cls, cfg: TrainConfig) -> DataPlaneSettings:
        """The data plane's settings from the training configuration, the fields of the same names."""
        return cls(**{f.name: getattr(cfg, f.name) for f in dataclasses.fields(cls)})
