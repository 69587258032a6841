"""What a rank function receives as its first argument."""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from types import FunctionType, ModuleType

import torch


@dataclass(frozen=True)
class RankContext:
    """This rank's place in the run: rank and world size in WORLD, backend, device, and the
    implementation under test (a package name such as ``cs336_systems``).

    ``ctx.load("collectives")`` imports ``<impl>.collectives``; rank functions never import the
    implementation at module level, so the pytest process itself never runs student code.
    """

    rank: int
    world_size: int
    backend: str
    device: torch.device
    impl: str
    unimportable: tuple[str, ...] = ()  # modules whose import ended a rank process earlier (grading only)
    hung_functions: dict | None = None  # "<impl>.<module>.<qualname>" -> the test it hung in (grading only)

    def load(self, module: str) -> ModuleType:
        name = f"{self.impl}.{module}"
        if name in self.unimportable:  # each attempt would cost a new worker pool, and end the same way
            raise ImportError(f"{name} is not imported again: importing it ended the rank process in an earlier "
                              "test (that test's failure shows how)")  # fmt: skip
        if name in sys.modules:
            return self._without_hung_functions(sys.modules[name])
        marker = _import_marker(self.rank)
        if marker is not None:  # if the import ends this process, the pool finds which module did it
            marker.write_text(name)
        module_object = importlib.import_module(name)
        if marker is not None:
            marker.unlink(missing_ok=True)
        return self._without_hung_functions(module_object)

    def _without_hung_functions(self, module: ModuleType) -> ModuleType:
        """Replace the module's functions and methods that hung in an earlier test by ones that raise at once:
        each test that needs them fails in no time with a pointer to that test, instead of hanging again (the
        module's own callers get the replacement too: they look the name up in the module or the class)."""
        for key, first in (self.hung_functions or {}).items():
            if not key.startswith(module.__name__ + "."):
                continue
            *classes, function = key[len(module.__name__) + 1 :].split(".")
            owner = module
            for name in classes:  # a method: "Class.method" (pool._hung_in names top-level classes only)
                owner = getattr(owner, name, None)
            original = vars(owner).get(function) if isinstance(owner, (type, ModuleType)) else None
            if isinstance(original, FunctionType) and not getattr(original, "_cs336_refused", False):
                setattr(owner, function, _refusing(key, first))
        return module


def _refusing(key: str, first_test: str):
    def refused(*args, **kwargs):
        raise RuntimeError(f"{key} was not run: it hung in an earlier test ({first_test}) and would hang here too; "
                           "that test's failure shows where")  # fmt: skip

    refused._cs336_refused = True
    return refused


def _import_marker(rank: int) -> Path | None:
    """``$CS336_IMPORT_MARKERS/rank<r>`` (set by the worker pool), or None outside a pool."""
    folder = os.environ.get("CS336_IMPORT_MARKERS")
    return Path(folder) / f"rank{rank}" if folder else None
