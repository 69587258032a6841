"""A submission that hunts for the hidden tests finds none while public tests run, and what it finds
during the hidden run never reaches results.json (staff only).

    pytest tests/staff/grader/test_exfiltration.py -v

The hunt is the broadcast of the "crashes" hostile bundle (tests/staff/grader/grading.py, HUNT), graded once
for this test and test_grade.py's attacks: it searches, from inside a rank, the sandbox it runs in and its
parent folders (the grade's whole work dir), HOME, TMPDIR, /tmp and every ``sys.path`` entry for hidden test
files, and ``sys.modules`` for hidden test modules; if it finds any it leaves a marker file and raises their
text. The public tests run in a sandbox without hidden files, so there it finds nothing and passes; the hidden
tests run afterwards in a sandbox of their own, where it does find them, and their failures are redacted. A
full-disk search would also find the staff checkout the grader runs from, unless the grade runs as a user that
cannot read it (``--run-as``: handouts/grading.md, "Security").
"""

from __future__ import annotations

import inspect
import json
import os
import pickle
import re
from pathlib import Path

import pytest
import torch

from scripts.grading import plugin
from scripts.grading.plugin import RANK_FAILED, WITHHELD, RankText, redacted
from tests.harness import pool
from tests.staff.grader.grading import CONTROL, DDP_REFERENCE, HIDDEN_TEST, grade

pytestmark = pytest.mark.staff

SECRET = "never shipped to students"  # in every hidden test file's docstring, and in no public file


def test_a_submission_hunting_for_hidden_tests_leaks_nothing_into_the_results(bundles):
    """The hunting broadcast passes the public test (nothing to find) and fails the hidden one (found the
    file) without its loot, the hidden test's source or any rank output appearing in results.json."""
    graded = bundles("crashes")
    results = graded.results
    text = json.dumps(results)
    tests = graded.by_name
    public, hidden = tests[CONTROL], tests[HIDDEN_TEST]
    assert public["score"] == public["max_score"] > 0, f"the public run's sandbox held something to find:\n{public}"
    assert graded.hunt_found, f"the hunt found nothing in the hidden run (is the test still real?): {hidden}"
    assert hidden["status"] == "failed" and "rank did not finish normally" in hidden["output"], hidden["output"]
    for leak in (SECRET, "LOOT", "def test_back_to_back"):
        assert leak not in text, f"{leak!r} appears in results.json:\n{text[:3000]}"
    # Public entries show their own tracebacks (the bundle's other attacks); the hidden run shows none.
    hidden_text = results["output"] + json.dumps([t for t in results["tests"] if "(hidden test)" in t["name"]])
    assert "Traceback" not in hidden_text, f"rank output of the hidden run appears in results.json:\n{hidden_text}"


# -- the reported attack and three more, from a submission's ddp.py in the hidden run ------------------------
# Each variant of the hidden DDP test (the attacks stay quiet in the public run's sandbox) meets one:
# "naive" raises a RuntimeError holding the names of the *hidden*.py files it finds and the first 400 characters
# of one (the reported attack; the oracle returns a failing rank's traceback, and used to quote it); "flat"
# prints them and exits (stdout); "individual" writes them into the files the grader reads back (the run's pytest
# log, a results.json beside the sandbox, HOME and TMPDIR) and then returns the sum for the average, so its
# failure is the test's own assertion, computed from values, which a student may see; "bucketed" raises an
# exception whose __str__ hunts for them (it runs wherever the exception is formatted). Each leaves its name and
# what it found in LEAK_FOUND, the test's proof that it ran and of what the hidden sandbox held.
LEAK_FOUND = Path(f"/tmp/cs336-leak-found-{os.getpid()}")
HOSTILE_DDP = (
    DDP_REFERENCE
    + """

import os as _os

LEAK_FOUND = "@LEAK_FOUND@"


def _loot(attack: str) -> str:
    here = _os.getcwd()
    roots = {here, _os.path.dirname(here), _os.path.dirname(_os.path.dirname(here)), _os.environ.get("HOME", ""),
             _os.environ.get("TMPDIR", "")}
    found = sorted({_os.path.join(d, n) for r in filter(None, roots) for d, _, names in _os.walk(r) for n in names
                    if "hidden" in n and n.endswith(".py")})
    with open(LEAK_FOUND, "a") as f:
        f.write(f"{attack}: {' '.join(found)}\\n")
    return "LOOT " + " ".join(found) + "\\n" + (open(found[0]).read()[:400] if found else "")


def _hidden_run() -> bool:
    return _os.path.basename(_os.path.dirname(_os.getcwd())) == "hidden"  # the grade's hidden/sandbox


_all_reduce_gradients, _all_reduce_gradients_flat = all_reduce_gradients, all_reduce_gradients_flat


def all_reduce_gradients(module, group=None):
    if _hidden_run():
        raise RuntimeError(_loot("naive"))
    _all_reduce_gradients(module, group)


def all_reduce_gradients_flat(module, group=None):
    if _hidden_run():
        print(_loot("flat"), flush=True)
        _os._exit(3)
    _all_reduce_gradients_flat(module, group)


class DDPIndividualParameters(DDPIndividualParameters):
    def finish_gradient_synchronization(self):
        super().finish_gradient_synchronization()
        if _hidden_run():
            loot = _loot("individual")
            here = _os.getcwd()
            for path in [_os.path.join(here, "..", "pytest.log"), _os.path.join(here, "..", "results.json"),
                         _os.path.join(_os.environ["HOME"], "loot.txt"),
                         _os.path.join(_os.environ["TMPDIR"], "loot.txt")]:
                try:
                    with open(path, "a") as f:
                        f.write(loot)
                except OSError:
                    pass
            for p in self.module.parameters():
                if p.grad is not None:
                    p.grad.mul_(3)  # the sum over the 3 ranks, not their average


class _Loot(Exception):
    def __str__(self):
        return _loot("bucketed")


class DDPBucketed(DDPBucketed):
    def finish_gradient_synchronization(self):
        if _hidden_run():
            raise _Loot()
        super().finish_gradient_synchronization()
"""
)
# Graded at world size 3, the hidden test's own (device-faithful mode skips a size past the largest --world-sizes).
LEAK_SELECT = "five_adamw_steps_on_three_ranks or (sgd_steps_match and naive and toy)"
HIDDEN_DDP = "test_five_adamw_steps_on_three_ranks_match_one_process (hidden test)"
PUBLIC_DDP = "test_sgd_steps_match_one_process_on_the_whole_batch"
ABSOLUTE_PATH = re.compile(r"(?<![\w.])/(?:tmp|work|root|home|usr|opt|autograder|var)/")


def test_what_a_submission_puts_in_a_hidden_failure_never_reaches_the_results(tmp_path):
    """The four attacks above: every hidden case fails, showing the test's docstring and the grader's fixed line
    or the test's own assertion computed from values (the "individual" case), and results.json holds nothing the
    attacks found (the hidden file's text or name), no traceback and no path. The hidden sandbox of a grade of
    part 2 holds part 2's hidden tests only (what the attacks found)."""
    LEAK_FOUND.unlink(missing_ok=True)
    graded = grade(tmp_path, {"ddp": HOSTILE_DDP.replace("@LEAK_FOUND@", str(LEAK_FOUND))}, parts="ddp",
                   select=LEAK_SELECT, world_sizes="3", deadline=30, test_timeout=120, timeout=300,
                   extra=("--staff-log", str(tmp_path / "staff.log")))  # fmt: skip
    found = LEAK_FOUND.read_text() if LEAK_FOUND.exists() else ""
    LEAK_FOUND.unlink(missing_ok=True)
    attacks = dict(line.split(": ", 1) for line in found.splitlines())
    assert set(attacks) == {"naive", "flat", "individual", "bucketed"}, f"not every attack ran:\n{found}"
    for attack, listing in attacks.items():
        names = {Path(p).name for p in listing.split()}
        assert names == {"test_ddp_hidden.py"}, f"{attack} found {names or 'nothing'}: the hidden sandbox of part 2"
    staff_log = (tmp_path / "staff.log").read_text()
    assert SECRET in staff_log, "the attacks' loot is not even in the staff log: did they reach the grader at all?"

    text = json.dumps(graded.results)
    public, hidden = graded.by_name[PUBLIC_DDP], graded.by_name[HIDDEN_DDP]
    assert public["score"] == public["max_score"] > 0, f"the public control failed:\n{public['output']}"
    assert hidden["score"] == 0 and hidden["output"].startswith("Five AdamW steps on 3 ranks"), hidden["output"]
    for leak in (SECRET, "LOOT", "def test_five", "Traceback", 'File "'):
        assert leak not in text, f"{leak!r} appears in results.json:\n{text[:4000]}"
    shown_to_students = json.dumps([graded.results["output"], graded.results["tests"]])
    assert "hidden.py" not in shown_to_students, f"a hidden file is named in what students see:\n{shown_to_students}"
    hidden_text = json.dumps([t for t in graded.results["tests"] if "(hidden test)" in t["name"]])
    hidden_text += json.dumps([e for e in graded.results["extra_data"]["entries"] if e["pool"] == "hidden"])
    assert not ABSOLUTE_PATH.search(hidden_text), f"a path appears in a hidden entry:\n{hidden_text}"
    (entry,) = [e for e in graded.results["extra_data"]["entries"] if e["pool"] == "hidden"]
    shown = {row[0].split("-")[0]: row[3] for row in entry["case_results"]}  # each case's headline
    for case in ("naive", "bucketed"):  # the oracle raises the rank's traceback as a RankFailure; were it quoted in
        fixed = (f"[call] {WITHHELD}", f"[call] {RANK_FAILED}")  # an assertion: withheld (a headline may be cut)
        assert any(line.startswith(shown[case].removesuffix("...")) for line in fixed), shown
    assert "rank did not finish normally" in shown["flat"], shown
    assert shown["individual"].startswith("[call] AssertionError: rank 0, step 0"), shown


# -- the grader's own defence, whatever an oracle does: fast, no grade -------------------------------------------
LOOT_TRACEBACK = f'Traceback (most recent call last):\n  File "/tmp/x/sandbox/cs336_systems/ddp.py"\nLOOT {SECRET}'


def _failure(exc: BaseException) -> pytest.ExceptionInfo:
    with pytest.raises(BaseException) as info:
        raise exc
    return info


def _seen(monkeypatch) -> RankText:
    """A RankText fed by the harness's reply loading, as in the hidden run; one reply: a rank's training history
    keyed by parameter name, with its traceback (tests/oracles/ddp.py's train_rank)."""
    assert "load_reply(" in inspect.getsource(pool.WorkerPool._receive), "the pool no longer rebuilds replies there"
    seen = RankText()
    monkeypatch.setattr(pool, "load_reply", pool.load_reply)  # restored after the test
    plugin.watch_rank_replies(seen)
    reply = {"status": "ok", "task": 1, "value": ([{"grads": {"0.norm.weight": torch.ones(2)}}], LOOT_TRACEBACK)}
    pool.load_reply(pickle.dumps(reply))
    return seen


def test_an_assertion_quoting_a_ranks_text_is_withheld_and_one_computed_from_values_is_shown(monkeypatch):
    """A hidden failure's assertion message is withheld when it quotes what a rank returned (whole, a piece, or
    a repr), has a traceback or is long; one computed from values is shown with its paths blanked."""
    seen = _seen(monkeypatch)
    secret_line = LOOT_TRACEBACK.splitlines()[-1]
    for quoting in (f"rank 0 raised:\n{LOOT_TRACEBACK}", f"the last line: {secret_line[3:30]}",
                    "expected keys ['0.norm.weight']", "x" * 700):  # fmt: skip
        assert redacted(_failure(AssertionError(quoting)), seen) == WITHHELD, quoting
    values = "rank 0, step 0, 0.norm.weight.grad: 2 of 2 elements differ; expected 1.0, got 3.0"
    assert redacted(_failure(AssertionError(values)), seen) == f"AssertionError: {values}"
    where = "rank 1 saved /tmp/cs336-grade-x/hidden/sandbox/ckpt into tests/staff/hidden/test_x_hidden.py: 2 != 3"
    shown = redacted(_failure(AssertionError(where)), seen)
    assert shown == "AssertionError: rank 1 saved <path> into <path>: 2 != 3", shown


def test_a_failure_raised_while_handling_a_rank_failure_shows_the_fixed_line(monkeypatch):
    """An oracle that catches the harness's RankFailure and raises its own assertion shows the fixed line."""
    seen = _seen(monkeypatch)
    try:
        try:
            raise pool.RankFailure(LOOT_TRACEBACK)
        except pool.RankFailure as exc:
            raise AssertionError(f"the run failed: {exc}") from None
    except AssertionError as exc:
        assert redacted(_failure(exc), seen) == RANK_FAILED
