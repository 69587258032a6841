"""The suite catches every staff mutant, quickly and with a message that teaches (staff only).

    pytest tests/staff/mutants -q                    # every mutant (CI)
    pytest tests/staff/mutants -k ddp_no_avg -v      # one: its edit applies, and its slice of the suite kills it

The mutants are the rows of table.py. First, for every row and without starting a rank, the edit must apply
to the current reference (``old`` occurs ``count`` times): a refactor of the reference that breaks a mutant
fails here in milliseconds, naming the mutant and the text. Then each row's checks run its slice of the suite
against ``--impl tests.staff.mutants.<id>`` (runner.py: one long-lived suite server for the whole session).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.staff.mutants.loader import mutated_source
from tests.staff.mutants.runner import assert_caught
from tests.staff.mutants.table import MUTANTS

pytestmark = pytest.mark.staff

HERE = Path(__file__).parent


def test_mutant_ids_are_unique_and_name_no_file_of_this_folder():
    """Mutant ids are unique and none is the name of a file here (pytest -k would pick the file too)."""
    ids = [m.id for m in MUTANTS]
    assert len(ids) == len(set(ids)), f"ids used twice: {sorted({i for i in ids if ids.count(i) > 1})}"
    taken = {p.stem for p in HERE.iterdir()}
    assert not taken & set(ids), f"these ids are also files of tests/staff/mutants: {sorted(taken & set(ids))}"


@pytest.mark.parametrize("mutant", MUTANTS, ids=str)
def test_the_edit_applies_to_the_reference(mutant):
    """``old`` occurs exactly ``count`` times in reference_solutions/<module>.py, and the edit changes it."""
    source = mutated_source(mutant)  # ValueError naming the mutant and the text, if not
    assert mutant.old != mutant.new, f"mutant {mutant.id}: new is old: the edit changes nothing"
    compile(source, f"<mutant {mutant.id}>", "exec")  # a syntax error here would end a rank at import
    assert mutant.checks and all(c.passes or c.expect for c in mutant.checks), f"mutant {mutant.id}: what must fail?"


@pytest.mark.parametrize("mutant", MUTANTS, ids=str)
def test_the_suite_kills_the_mutant(mutant):
    """Each check's slice of the suite fails on the mutant (or, for ``passes=True``, passes), in bounded time,
    with a message that teaches."""
    for check in mutant.checks:
        assert_caught(mutant.id, check)
