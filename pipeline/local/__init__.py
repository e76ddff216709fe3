"""The local backend: the compiled pipeline definition executed on this machine, no AWS account needed.

`runner` executes it as the service would (`settings`: what binds it to this machine), each job on the emulator
(`pipeline.emulator`); `sample_data` generates a dataset when none is given; `requirements` tells whether the code's
requirements.txt installs without the network, as an isolated job must install it.
"""
