"""What a rank function receives as its first argument."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType

import torch


@dataclass(frozen=True)
class RankContext:
    """This rank's place in the run: rank and world size in WORLD, backend, device, and the
    implementation under test (a package name such as ``reference_solutions``).

    ``ctx.load("collectives")`` imports ``<impl>.collectives``; rank functions never import the
    implementation at module level, so the pytest process itself never runs student code.
    """

    rank: int
    world_size: int
    backend: str
    device: torch.device
    impl: str

    def load(self, module: str) -> ModuleType:
        return importlib.import_module(f"{self.impl}.{module}")
