"""The grader against buggy and hostile submissions, each built on the fly from the reference (staff only).

    pytest tests/staff/grader/test_grade.py -v

Thirteen hostile attacks ride in two submissions (tests/staff/grader/grading.py, BUNDLES): each copies
reference_solutions/collectives.py and plants each attack in a function (or, for all_reduce, a caller) that
exactly one graded test reaches. One grade per bundle (part 1, world size 2, one case per test) through
``python -m scripts.grading`` in a subprocess; each case then checks, from that grade: its attacked test
scores 0 with a clear message, the untouched test (broadcast) still scores full marks, the grade ends in time
and leaves no process. The timing-sensitive bundle is graded once more while a second grade loads the machine.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.harness.pool import ROOT as REPO
from tests.staff.grader.grading import (
    ACCOUNTING,
    ATTACKS,
    BUNDLE_OF,
    BUNDLES,
    CONTROL,
    DDP_TEST,
    HIDDEN_TEST,
    REFERENCE,
    TIMING_SENSITIVE,
    Graded,
    attacked_test,
    grade,
    leftover_sleepers,
)

pytestmark = pytest.mark.staff

ATTACKED = "all_reduce_sums_in_place_on_every_rank"
SELECT = f"({ATTACKED} or broadcast_copies_src_tensor_to_every_rank) and float32 and not last"
# Three modules, each failing at import in its own way, graded together (parts 1, 6 and 2; two tests each).
IMPORT_CASES = {  # case -> (module, code run at its import, expected text, two of its tests)
    "sys_exit_at_import": ("collectives", "import sys\nsys.exit(0)\n", "SystemExit",
                           "((broadcast_copies_src_tensor_to_every_rank or all_reduce_sums_in_place_on_every_rank)"
                           " and float32 and not last)"),
    "exception_at_import": ("accounting", "raise RuntimeError('broken at import')\n", "broken at import",
                            "(bubble_and_ring_all_reduce_examples or training_flops_and_mfu_examples)"),
    # The first case shows how the rank died; later ones fail at once instead of starting new pools.
    "os_exit_at_import": ("ddp", "import os\nos._exit(3)\n", ("exited with code 3", "is not imported again"),
                          "((gradients_of_several_dtypes_are_averaged or adamw_steps_match_one_process_on_the_whole"
                          "_batch) and naive)"),
}  # fmt: skip


def _grade(tmp_path: Path, source: str, timeout: float = 150, select: str = SELECT, module: str = "collectives",
           extra: tuple[str, ...] = ()) -> tuple[dict, float, subprocess.CompletedProcess]:  # fmt: skip
    """One grade of ``source`` as ``module`` (world size 2, deadline 6 s): results, seconds, the process."""
    g = grade(tmp_path, {module: source}, parts=module, select=select, extra=extra, wait=timeout)
    return g.results, g.seconds, g.proc


def _by_name(results: dict) -> dict:
    return {t["name"]: t for t in results["tests"]}


def _assert_only_the_attacks_lost(graded: Graded, attack: str) -> None:
    """``attack``'s test scored 0 and its output shows the attack's text (or one of them); broadcast kept full
    marks, and the total is broadcast's alone (every other test of the bundle is attacked, and the hidden test
    of "crashes" is the hunt's); no process the submission started is left, no forged reply ran code in the
    judge."""
    tests = {name: t for name, t in graded.by_name.items() if t["tags"] == ["collectives"]}
    attacked, control = tests[attacked_test(attack)], tests[CONTROL]
    assert attacked["score"] == 0 and attacked["status"] == "failed", attacked
    expect = ATTACKS[attack][1]
    expected = expect if isinstance(expect, tuple) else (expect,)
    assert any(e in attacked["output"] for e in expected), f"{attack}: no {expected} in\n{attacked['output']}"
    assert control["score"] == control["max_score"] > 0, control["output"]
    bundle = BUNDLE_OF[attack]
    graded_tests = {CONTROL, *map(attacked_test, BUNDLES[bundle]), *([HIDDEN_TEST] if bundle == "crashes" else [])}
    assert set(tests) == graded_tests, f"the grade's tests {sorted(tests)} are not the bundle's {sorted(graded_tests)}"
    part_score = graded.results["extra_data"]["parts"]["collectives"][0]  # the "timing" bundle also grades ddp
    assert part_score == control["max_score"], graded.results["output"]
    total = round(sum(t["score"] for t in graded.results["tests"]), 3)
    assert graded.results["score"] == pytest.approx(total, abs=0.01) and total < 1000, graded.results["output"]
    assert not leftover_sleepers(), leftover_sleepers()
    assert not Path("/tmp/cs336-pwned").exists(), "a forged reply ran code in the judge"


@pytest.mark.parametrize("case", ATTACKS)
def test_a_hostile_all_reduce_scores_zero_and_the_rest_is_still_graded(bundles, case):
    """A hostile function scores 0 with a telling message; broadcast still gets full marks, in time, no leftovers."""
    graded = bundles(BUNDLE_OF[case])
    _assert_only_the_attacks_lost(graded, case)
    assert graded.seconds < 120, f"grading the {BUNDLE_OF[case]!r} bundle took {graded.seconds:.0f} s"


@pytest.fixture(scope="module")
def failing_imports(tmp_path_factory) -> Graded:
    """One grade of a submission whose collectives.py, accounting.py and ddp.py each fail at import."""
    modules = {}
    for module, code, _, _ in IMPORT_CASES.values():
        head, future, rest = (
            (REPO / "reference_solutions" / f"{module}.py")
            .read_text()
            .partition("from __future__ import annotations\n")
        )
        modules[module] = head + future + code + rest
    select = " or ".join(case[3] for case in IMPORT_CASES.values())
    return grade(tmp_path_factory.mktemp("imports"), modules, parts=",".join(modules), select=select, wait=300)


@pytest.mark.parametrize("case", IMPORT_CASES)
def test_a_module_that_fails_at_import_scores_zero_with_the_reason(failing_imports, case):
    """A module that exits or raises at import scores 0 on every test, and each test's output says why."""
    module, _, expect, _ = IMPORT_CASES[case]
    results = failing_imports.results
    tests = [t for t in results["tests"] if t["tags"] == [module]]
    assert results["score"] == 0 and len(tests) == 2, results
    expected = expect if isinstance(expect, tuple) else (expect,)
    for t in tests:
        assert t["status"] == "failed" and any(e in t["output"] for e in expected), t["output"]
    if case == "os_exit_at_import":
        died = sum(t["output"].count("exited with code 3") for t in tests)
        assert died <= 2, f"the module ended {died} rank processes: each later case paid a new pool"


def test_the_reference_gets_full_marks_and_the_stub_gets_zero(part1_reference, batch_of_reference_and_stub):
    """The reference scores full marks (all of part 1, hidden tests included); the untouched stub scores 0 on every
    test with its NotImplementedError and handout (the batch's stub, tests/staff/grader/conftest.py)."""
    ref = part1_reference.results
    most = sum(t["max_score"] for t in ref["tests"])
    assert ref["score"] == pytest.approx(most, abs=0.01) and most > 0, ref["output"]
    res = batch_of_reference_and_stub.results["bob.zip"]
    assert res["score"] == 0 and res["tests"], res
    for t in res["tests"]:
        assert "NotImplementedError: Task 1." in t["output"] and "handouts/01-collectives.md" in t["output"], t


DEADLOCKED_BROADCAST = """

def broadcast(tensor, src=0, group=None):
    dist.recv(tensor, src=1 - dist.get_rank())  # both ranks wait: a deadlock
    return tensor
"""
CALLERS_OF_BROADCAST = {"test_broadcast_copies_src_tensor_to_every_rank",
                        "test_collectives_on_a_subgroup_use_global_src_dst_and_group_order",
                        "test_bad_input_raises_on_every_rank_before_communicating",
                        "test_back_to_back_collectives_on_odd_world_sizes"}  # fmt: skip


@pytest.fixture(scope="module")
def part1_hanging(tmp_path_factory) -> tuple[Graded, str]:
    """The whole of part 1 (public and hidden) at world size 2 with a deadlocked broadcast, graded as
    ``part1_reference`` is (deadline 10 s), and pytest's own output (--staff-log, hidden run included)."""
    folder = tmp_path_factory.mktemp("part1-hanging")
    log = folder / "staff.log"
    graded = grade(folder, {"collectives": REFERENCE + DEADLOCKED_BROADCAST, "accounting": ACCOUNTING},
                   parts="collectives", deadline=10, test_timeout=240, timeout=600, memory_mb=None,
                   extra=("--staff-log", str(log)), wait=600)  # fmt: skip
    return graded, log.read_text()


def test_a_deadlocked_function_costs_one_deadline_and_only_its_own_tests(part1_hanging):
    """Once broadcast hangs, later tests that call it (from other rank functions, and in the hidden run) fail at
    once, pointing to the test where it hung, and tests of other functions run by the same rank function pass."""
    graded, log = part1_hanging
    tests = graded.by_name
    assert tests["test_broadcast_copies_src_tensor_to_every_rank"]["score"] == 0
    reduce = tests["test_reduce_sums_into_dst_and_leaves_others_unchanged"]
    assert reduce["score"] == reduce["max_score"] > 0, f"a broadcast hang failed reduce too:\n{reduce['output']}"
    subgroup = tests["test_collectives_on_a_subgroup_use_global_src_dst_and_group_order"]
    assert "cs336_systems.collectives.broadcast was not run: it hung in an earlier test" in subgroup["output"], (
        subgroup["output"]
    )
    # The hidden run is a new pytest process: it is told what hung in the public one and does not wait again.
    hidden = log.partition("[grader] hidden tests")[2]
    assert "broadcast was not run: it hung in an earlier test" in hidden, hidden[-3000:]
    assert "no answer within" not in hidden, f"the hidden run waited for broadcast to hang again:\n{hidden[-3000:]}"
    assert graded.seconds < 150, f"grading took {graded.seconds:.0f} s"


def test_a_deadlocked_method_is_refused_like_a_function(bundles):
    """A method that hangs (rank 0 waits in a barrier the others never join) is not run again in later cases
    (they fail at once, naming it with its class); the other class, run by the same rank function, is graded.
    Part 2's ddp.py rides in the "timing" bundle's grade (tests/staff/grader/grading.py)."""
    graded = bundles("timing")
    entry = graded.by_name[DDP_TEST]
    assert 0 < entry["score"] < entry["max_score"], entry  # the bucketed cases pass, the individual ones fail
    cut = "cs336_systems.ddp.DDPIndividualParameters.finish_gradient_synchronization was not run: it hung"
    assert cut in graded.staff_log, graded.staff_log[-3000:]
    assert graded.seconds < 120, f"grading took {graded.seconds:.0f} s"


def test_one_deadlocked_function_grades_within_twice_the_reference_time(part1_reference, part1_hanging):
    """The whole of part 1 with a deadlocked broadcast takes at most twice as long as the reference's grade,
    and every test that does not need broadcast keeps its points."""
    reference, reference_s = part1_reference.results, part1_reference.seconds
    most = sum(t["max_score"] for t in reference["tests"])
    assert reference["score"] == pytest.approx(most, abs=0.01), reference["output"]
    hanging, hanging_s = part1_hanging[0].results, part1_hanging[0].seconds
    assert hanging_s <= 2 * reference_s, f"{hanging_s:.0f} s, the reference {reference_s:.0f} s"
    lost = {t["name"].removesuffix(" (hidden test)") for t in hanging["tests"] if t["score"] < t["max_score"]}
    assert "test_broadcast_copies_src_tensor_to_every_rank" in lost and lost <= CALLERS_OF_BROADCAST, lost


# The cases whose outcome depends on time (a hang must meet its deadline, a hog its memory cap, a flood its
# file cap, before the test's own timeout): they must hold on a machine that a second grade keeps busy. They
# share the "timing" bundle with other attacks; its one grade runs under load, and its time is held to the
# unloaded bound (120 s) by the hostile cases above and to the loaded one (180 s) here.


@pytest.fixture(scope="module")
def timing_bundle_under_load(bundles) -> Graded:
    """The "timing" bundle's one grade, made while a second grade loads the machine (conftest.py, bundles)."""
    return bundles("timing")


@pytest.mark.parametrize("case", TIMING_SENSITIVE + [c for c in BUNDLES["timing"] if c not in TIMING_SENSITIVE])
def test_timing_sensitive_cases_hold_while_a_second_grade_loads_the_machine(timing_bundle_under_load, case):
    """With another grade busy on the same cores, a hang, an output flood and a memory hog still score 0 with
    their own diagnosis, broadcast still gets full marks, and the grade still ends in time."""
    _assert_only_the_attacks_lost(timing_bundle_under_load, case)
    assert timing_bundle_under_load.seconds < 180, f"grading took {timing_bundle_under_load.seconds:.0f} s under load"
