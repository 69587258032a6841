"""What is staff-only, defined once: the student release, the grading sandbox and the Gradescope zip read it.

    from scripts.grading.staff import is_staff_only, reaches_grading_machine
    is_staff_only("tests/staff/hidden/test_ddp_hidden.py")            # True: never in the student release
    reaches_grading_machine("tests/staff/hidden/test_ddp_hidden.py")  # True: graded, so in the Gradescope zip

Two rules, one table. The student release (scripts/release/cut.py) drops every path below.
The grading machine (scripts/grading/make_autograder_zip.py, and the sandbox a submission runs in,
scripts/grading/sandbox.py) gets the kit minus the paths marked ``grading=False``: the hidden tests
and the grader must be there, the reference and the tests that need it (mutants, grader tests,
the stub check) must not, so that no copy of the reference exists where a submission runs.
A path ending in ``/`` is a folder (everything below it).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StaffPath:
    path: str  # relative to the repository root; a trailing "/" means the whole folder
    kind: str  # staff tests: hidden, mutants, grader, stubs (one folder or file each); else tool, docs...
    grading: bool  # needed on the grading machine (the Gradescope zip and the sandbox)


STAFF_ONLY = (
    StaffPath("reference_solutions/", "reference", grading=False),
    # Staff tests, one folder per kind (tests/README.md); the package marker makes the hidden ones importable.
    StaffPath("tests/staff/__init__.py", "package", grading=True),
    StaffPath("tests/staff/hidden/", "hidden", grading=True),
    StaffPath("tests/staff/mutants/", "mutants", grading=False),
    StaffPath("tests/staff/grader/", "grader", grading=False),
    StaffPath("tests/staff/test_stubs.py", "stubs", grading=False),  # stubs generated from the reference, current
    StaffPath("tests/staff/test_benchmarks.py", "benchmarks", grading=False),  # runs scripts/bench/ on the reference
    StaffPath("tests/staff/test_figures.py", "figures", grading=False),  # handout images vs scripts/figures/
    StaffPath("tests/staff/test_answer_key.py", "answer_key", grading=False),  # the key vs the reference
    StaffPath("tests/staff/test_kit_links.py", "kit_links", grading=False),  # kits: links, commands, leftovers
    StaffPath("tests/staff/test_generated_numbers.py", "numbers", grading=False),  # guide/README numbers generated
    StaffPath("tests/staff/test_checkpoint_staging.py", "staging", grading=False),  # Part 10's pinned staging
    StaffPath("tests/staff/test_trace_summary.py", "trace_summary", grading=False),  # the trace tool's --summary
    # A second implementation (the reference's work, its own bad-input wording) and its test.
    StaffPath("tests/staff/alt_impl/", "alternative", grading=False),
    # Staff tools and their documentation.
    StaffPath("scripts/grading/", "tool", grading=True),
    StaffPath("scripts/release/", "tool", grading=False),  # the release cut, the stub generator and check
    StaffPath("scripts/main.sh", "tool", grading=False),
    StaffPath(".ci/", "tool", grading=False),
    StaffPath("handouts/grading.md", "docs", grading=False),
    # The answer key to the written problems: its sources (they import the reference) and the generated
    # markdown. Never on the grading machine either: a submission runs there and could print it.
    StaffPath("scripts/grading/answer_key/", "answer key", grading=False),
    StaffPath("handouts/answer-key/", "answer key", grading=False),
)
STAFF_TESTS = "tests/staff/"  # every staff test lives below this folder, in one of the kinds above


def _matches(rel: str, entries) -> bool:
    return any(rel == e.path or (e.path.endswith("/") and rel.startswith(e.path)) for e in entries)


def is_staff_only(rel: str) -> bool:
    """True for a repository-relative path that must never reach students."""
    return _matches(rel, STAFF_ONLY)


def reaches_grading_machine(rel: str) -> bool:
    """False for a staff path that must stay off the grading machine (the reference and what needs it)."""
    return not _matches(rel, [e for e in STAFF_ONLY if not e.grading])


def path_of(kind: str) -> str:
    """The path of a staff-test kind: ``path_of("hidden")`` -> ``tests/staff/hidden/``."""
    (entry,) = [e for e in STAFF_ONLY if e.kind == kind]
    return entry.path
