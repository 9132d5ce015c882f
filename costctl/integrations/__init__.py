"""Ready callbacks that save a checkpoint when costctl asks for one (see :mod:`costctl.job`).

* :mod:`.hf` — ``CostctlCheckpointCallback`` for the Hugging Face ``Trainer``;
* :mod:`.lightning` — ``CostctlCheckpoint`` for PyTorch Lightning.

Each imports its framework only when the callback class is first used, so importing these
modules costs nothing on machines without the framework.
"""
