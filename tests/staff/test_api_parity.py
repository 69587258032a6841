"""The student package and the staff reference expose the same API (handouts/api.md is generated from the stubs).

    pytest tests/staff/test_api_parity.py

For every module of ``reference_solutions``: the same public names exist in ``cs336_systems``,
functions and methods have identical signatures, and docstrings are identical (the stub's
docstring is the specification, so it must not drift from what the reference implements).
Both packages are imported inside a rank process, never in pytest itself.
"""

from __future__ import annotations

import inspect

import pytest

from tests.harness import run_ranks
from tests.harness.pool import ROOT

# Staff: it needs the reference. Not `harness`: it checks the student package, not the harness.
pytestmark = pytest.mark.staff

MODULES = sorted(p.stem for p in (ROOT / "reference_solutions").glob("*.py") if not p.stem.startswith("_"))
assert MODULES, f"no reference modules under {ROOT / 'reference_solutions'}"  # an empty parametrize would pass


def _public_api(module) -> dict[str, tuple[str, str | None]]:
    """name -> (signature, docstring) for public functions/classes defined in ``module``, and their methods."""
    api = {}
    for name, obj in vars(module).items():
        if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
            continue
        if inspect.isclass(obj):
            api[name] = ("class", inspect.getdoc(obj))
            for attr, member in vars(obj).items():
                if (attr.startswith("_") and attr != "__init__") or not callable(getattr(member, "__func__", member)):
                    continue
                func = getattr(member, "__func__", member)
                api[f"{name}.{attr}"] = (str(inspect.signature(func)), inspect.getdoc(func))
        elif callable(obj):
            api[name] = (str(inspect.signature(obj)), inspect.getdoc(obj))
    return api


def api_rank(ctx, module: str):
    import importlib

    return {
        pkg: _public_api(importlib.import_module(f"{pkg}.{module}")) for pkg in ("reference_solutions", "cs336_systems")
    }


@pytest.mark.parametrize("module", MODULES)
def test_student_stubs_match_the_reference_api(module):
    """Each stub module has the reference's public names, with identical signatures and docstrings."""
    assert (ROOT / "cs336_systems" / f"{module}.py").exists(), f"cs336_systems/{module}.py is missing"
    apis = run_ranks(1, api_rank, module)[0]
    ref, stub = apis["reference_solutions"], apis["cs336_systems"]
    assert sorted(ref) == sorted(stub), (
        f"{module}: public names differ.\n  only in reference: {sorted(set(ref) - set(stub))}"
        f"\n  only in cs336_systems: {sorted(set(stub) - set(ref))}"
    )
    for name in ref:
        assert ref[name][0] == stub[name][0], f"{module}.{name}: signature {stub[name][0]} != reference {ref[name][0]}"
        assert ref[name][1] == stub[name][1], f"{module}.{name}: the stub's docstring differs from the reference's"
