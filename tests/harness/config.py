"""Run-wide settings: which implementation, backend and deadline ``run_ranks`` uses.

Start from the environment (``defaults.py``); tests/conftest.py overwrites them from pytest's command line.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tests.harness.defaults import env_backend, env_deadline, env_impl, resolve_impl

# A file holding the GPU count a gloo run stands for ("" or no file: no limit): with --device-faithful asked for,
# the largest --world-sizes. tests/conftest.py writes it for each session, the parent (tests/harness/run.py) and the
# ranks (tests/harness/stray_tensors.py) read it when they need it: a rank of a pool kept from an earlier session
# reads this session's count, not the one in its environment when it started.
ENV_DEVICE_FAITHFUL_GPUS = "CS336_DEVICE_FAITHFUL_GPUS_FILE"


def set_stand_in_gpus(count: int | None) -> None:
    """Write this session's GPU count (None: no limit) where the parent and every rank read it."""
    path = Path(tempfile.gettempdir()) / f"cs336-stand-in-gpus-{os.getpid()}"
    path.write_text("" if count is None else str(count))
    os.environ[ENV_DEVICE_FAITHFUL_GPUS] = str(path)


def stand_in_gpus() -> int | None:
    """The GPU count a gloo run stands for, or None (no limit)."""
    try:
        text = Path(os.environ.get(ENV_DEVICE_FAITHFUL_GPUS, "")).read_text().strip()
    except OSError:
        return None
    return int(text) if text else None


@dataclass
class Config:
    impl: str = field(default_factory=lambda: resolve_impl(env_impl()))  # a package name, aliases resolved
    backend: str = field(default_factory=env_backend)  # gloo (CPU) or nccl (rank r on cuda:r)
    deadline: float = field(default_factory=env_deadline)  # seconds per distributed run


CONFIG = Config()
