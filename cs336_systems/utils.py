"""Given helpers (not stubs): seeding, data and timing, shared by tests and benchmarks."""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (all devices) so a run is reproducible."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def random_batch(batch: int, in_features: int, out_features: int, seed: int, dtype=torch.float32):
    """A reproducible (inputs, targets) regression batch: shapes (batch, in), (batch, out)."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, in_features, generator=gen, dtype=dtype)
    y = torch.randn(batch, out_features, generator=gen, dtype=dtype)
    return x, y


def synchronize(device: torch.device | str | None = None) -> None:
    """Wait for queued GPU work (a no-op on CPU), so wall-clock timings are honest."""
    device = torch.device(device) if device is not None else None
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


def time_fn(fn: Callable[[], object], *, warmup: int = 2, repeats: int = 5, device=None) -> float:
    """Median seconds of ``fn()`` over ``repeats`` runs after ``warmup`` runs (synchronizing GPUs)."""
    for _ in range(warmup):
        fn()
    synchronize(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)
