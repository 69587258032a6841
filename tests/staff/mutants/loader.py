"""Mutants applied in memory: ``tests.staff.mutants.<id>`` is a package that exists in no folder (staff only).

tests/staff/mutants/__init__.py installs ``MutantFinder`` on ``sys.meta_path``, so any process that imports
``tests.staff.mutants.<id>.<module>`` (the pytest process, the suite server, every rank process, which
import ``<impl>.<module>`` by name) gets:

- for the row's module: the reference's source, ``reference_solutions/<module>.py``, with the row's edit
  applied, compiled under the file name ``<mutant <id>: reference_solutions/<module>.py>`` (its lines are
  registered with ``linecache``, so tracebacks and stack dumps show the mutated code);
- for any other module: the reference's own module object (``from . import ddp`` in a mutant of mesh.py
  gets ``reference_solutions.ddp``).

Nothing is written to disk. An edit whose ``old`` text no longer occurs ``count`` times raises an ImportError
that names the mutant and the text (the fast test in test_mutants.py says the same without starting a rank).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import linecache
import sys
from pathlib import Path
from types import ModuleType

from tests.staff.mutants.table import BY_ID, Mutant

PACKAGE = "tests.staff.mutants"
REFERENCE = "reference_solutions"
REFERENCE_DIR = Path(__file__).resolve().parents[3] / REFERENCE


def mutated_source(mutant: Mutant) -> str:
    """``reference_solutions/<module>.py`` with ``mutant``'s edit applied; ``ValueError`` naming the mutant
    and its old text when that text does not occur exactly ``mutant.count`` times."""
    path = REFERENCE_DIR / f"{mutant.module}.py"
    if not path.is_file():
        raise ValueError(f"mutant {mutant.id}: {REFERENCE}/{mutant.module}.py does not exist")
    source = path.read_text()
    found = source.count(mutant.old)
    if found != mutant.count:
        raise ValueError(f"mutant {mutant.id}: expected {mutant.count} occurrence(s) of {mutant.old!r} in "
                         f"{REFERENCE}/{mutant.module}.py, found {found}")  # fmt: skip
    return source.replace(mutant.old, mutant.new)


class _MutantPackage(importlib.abc.Loader):
    """``tests.staff.mutants.<id>``: an empty package whose docstring is the bug."""

    def __init__(self, mutant: Mutant) -> None:
        self.mutant = mutant

    def create_module(self, spec):
        return None  # the default module

    def exec_module(self, module: ModuleType) -> None:
        module.__doc__ = f"Mutant: {self.mutant.bug}."


class _MutatedModule(importlib.abc.Loader):
    """``tests.staff.mutants.<id>.<module>``: the reference module with the row's edit."""

    def __init__(self, mutant: Mutant) -> None:
        self.mutant = mutant
        self.filename = f"<mutant {mutant.id}: {REFERENCE}/{mutant.module}.py>"

    def create_module(self, spec):
        return None

    def exec_module(self, module: ModuleType) -> None:
        try:
            source = mutated_source(self.mutant)
        except ValueError as e:
            raise ImportError(str(e), name=module.__name__) from None
        lines = source.splitlines(keepends=True)
        linecache.cache[self.filename] = (len(source), None, lines, self.filename)  # no mtime: never dropped
        exec(compile(source, self.filename, "exec"), module.__dict__)  # noqa: S102 - staff-only test tooling


class _ReferenceAlias(importlib.abc.Loader):
    """``tests.staff.mutants.<id>.<other>``: the reference's module ``reference_solutions.<other>`` itself."""

    def __init__(self, reference: str) -> None:
        self.reference = reference
        self.original_spec = None

    def create_module(self, spec):
        module = importlib.import_module(self.reference)
        self.original_spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self.original_spec  # the import system set it to the alias's spec: restore it


class MutantFinder(importlib.abc.MetaPathFinder):
    """Finds ``tests.staff.mutants.<id>`` and its modules for every row of the table (nothing else)."""

    def find_spec(self, fullname, path=None, target=None):
        parts = fullname.split(".")
        if len(parts) not in (4, 5) or ".".join(parts[:3]) != PACKAGE or parts[3] not in BY_ID:
            return None
        mutant = BY_ID[parts[3]]
        if len(parts) == 4:
            return importlib.machinery.ModuleSpec(fullname, _MutantPackage(mutant), is_package=True)
        module = parts[4]
        if module == mutant.module:
            return importlib.machinery.ModuleSpec(fullname, _MutatedModule(mutant))
        if importlib.util.find_spec(f"{REFERENCE}.{module}") is None:
            return None  # not a module of the reference either: ModuleNotFoundError, as for any package
        return importlib.machinery.ModuleSpec(fullname, _ReferenceAlias(f"{REFERENCE}.{module}"))


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once per process)."""
    if not any(isinstance(f, MutantFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, MutantFinder())
