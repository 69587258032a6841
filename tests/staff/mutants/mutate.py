"""Build a mutant module from the reference by one textual edit of its source.

    # tests/staff/mutants/collectives_off_by_one/collectives.py
    from tests.staff.mutants.mutate import mutate
    mutate(globals(), "reference_solutions.collectives", old="(me - step) % n", new="(me - step + 1) % n")

The edit must match exactly once, so a mutant breaks loudly (instead of silently becoming the
reference) when the reference is refactored.
"""

from __future__ import annotations

import importlib.util


def mutate(namespace: dict, module: str, old: str, new: str, count: int = 1) -> None:
    """Execute ``module``'s source with ``old`` replaced by ``new`` into ``namespace``."""
    spec = importlib.util.find_spec(module)
    source = open(spec.origin).read()
    found = source.count(old)
    if found != count:
        raise RuntimeError(f"mutant of {module}: expected {count} occurrence(s) of {old!r}, found {found}")
    code = compile(source.replace(old, new), f"<mutant of {spec.origin}>", "exec")
    exec(code, namespace)  # noqa: S102 - staff-only test tooling
