"""The emulator: one SageMaker job at a time on this machine, from its Create*Job request alone.

A training job (`job.EmulatedJob`): hosts laid out as containers see them (`layout`, `checkpoints`), one process per
host with its container's environment (`container_env`), imports (`image_guard`), volume (`volumes`) and, when asked,
a faulted link (`links`, `link_delay`); watched until it ends (`failures`), restarted after a spot interruption
(`interruption`), its results packed (`results`). A processing job (`processing`). Nothing here knows the pipeline,
the local runner or the CLI.
"""
