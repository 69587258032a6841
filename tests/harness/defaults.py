"""The suite's defaults, defined once: read by tests/conftest.py, the grader and the benchmarks.

Each setting has an environment variable (``CS336_IMPL``, ``CS336_BACKEND``, ``CS336_WORLD_SIZES``,
``CS336_DEADLINE``); pytest's command line wins over it, and it wins over the default here.
"""

from __future__ import annotations

import os

# What `--impl student` names; any other value is an importable package name.
IMPL_ALIASES = {"student": "cs336_systems"}
# <staff> (scripts/release/cut.py leaves these lines out of the student release, which has no reference)
IMPL_ALIASES["reference"] = "reference_solutions"  # the staff's implementation
# </staff>

DEFAULT_IMPL = "student"
DEFAULT_BACKEND = "gloo"
DEFAULT_WORLD_SIZES = "1,2,4"
DEFAULT_DEADLINE_S = 30.0

ENV_IMPL, ENV_BACKEND = "CS336_IMPL", "CS336_BACKEND"
ENV_WORLD_SIZES, ENV_DEADLINE = "CS336_WORLD_SIZES", "CS336_DEADLINE"
# Caps on each rank process, set by the grader (0 or unset: none): its log file and its address space.
ENV_WORKER_LOG_LIMIT_MB, ENV_WORKER_MEMORY_LIMIT_MB = "CS336_WORKER_LOG_LIMIT_MB", "CS336_WORKER_MEMORY_LIMIT_MB"
# Set to 1: a fresh default process group for every test, even after a passing one (tests/harness/pool.py);
# slower (~30 ms a test), for when a passing test must not be able to leave a message for the next.
ENV_FRESH_GROUPS = "CS336_FRESH_GROUPS"
# Set to 1 (or pytest --device-faithful): the ranks judge as NCCL on GPUs would: a CPU tensor (made without
# device=, a .cpu() copy) fails, naming where it was made, where a GPU refuses it (tests/harness/device_faithful.py).
ENV_DEVICE_FAITHFUL = "CS336_DEVICE_FAITHFUL"
# How gloo pairs sends with receives (tests/harness/p2p_matching.py): "tag-blind" (the default) is NCCL's rule,
# tags ignored and the k-th receive between two ranks gets the k-th send, checked; "tags" is gloo's own.
ENV_P2P_MATCHING, DEFAULT_P2P_MATCHING = "CS336_P2P_MATCHING", "tag-blind"
ENV_DEVICE_FAITHFUL_LOG = "CS336_DEVICE_FAITHFUL_LOG"  # a file: list each refusal there instead of raising


def resolve_impl(name: str) -> str:
    """``student`` -> ``cs336_systems`` (and the other names of ``IMPL_ALIASES``), else the name itself."""
    return IMPL_ALIASES.get(name, name)


def env_impl() -> str:
    return os.environ.get(ENV_IMPL, DEFAULT_IMPL)


def env_backend() -> str:
    return os.environ.get(ENV_BACKEND, DEFAULT_BACKEND)


def env_world_sizes() -> str:
    return os.environ.get(ENV_WORLD_SIZES, DEFAULT_WORLD_SIZES)


def env_deadline() -> float:
    return float(os.environ.get(ENV_DEADLINE, DEFAULT_DEADLINE_S))


def env_fresh_groups() -> bool:
    return os.environ.get(ENV_FRESH_GROUPS, "0") not in ("", "0")


def env_p2p_matching() -> str:
    value = os.environ.get(ENV_P2P_MATCHING, DEFAULT_P2P_MATCHING)
    if value not in ("tag-blind", "tags"):
        raise ValueError(f"{ENV_P2P_MATCHING} must be tag-blind or tags, got {value!r}")
    return value


def env_device_faithful() -> bool:
    return os.environ.get(ENV_DEVICE_FAITHFUL, "0") not in ("", "0")
