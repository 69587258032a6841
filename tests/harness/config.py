"""Run-wide settings: which implementation, backend and deadline ``run_ranks`` uses.

Start from the environment (``defaults.py``); tests/conftest.py overwrites them from pytest's command line.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tests.harness.defaults import env_backend, env_deadline, env_impl, resolve_impl

# The GPU count a device-faithful run on gloo stands for: the largest --world-sizes (tests/conftest.py sets it, the
# ranks read it: tests/harness/stray_tensors.py).
ENV_DEVICE_FAITHFUL_GPUS = "CS336_DEVICE_FAITHFUL_GPUS"


@dataclass
class Config:
    impl: str = field(default_factory=lambda: resolve_impl(env_impl()))  # a package name, aliases resolved
    backend: str = field(default_factory=env_backend)  # gloo (CPU) or nccl (rank r on cuda:r)
    deadline: float = field(default_factory=env_deadline)  # seconds per distributed run


CONFIG = Config()
