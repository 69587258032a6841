"""Graded runs that several staff tests of the grader read: each is graded once per session, when first asked for.

A grade costs the grader's, pytest's and the ranks' startup before any test runs; tests that only read a
grade's results share it instead of grading the same submission again.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.harness.pool import ROOT as REPO
from tests.staff.grader import grader_env
from tests.staff.grader.grading import ACCOUNTING, REFERENCE, Graded, grade, grade_bundle, second_grade_running

LOW_LIMITS = "ulimit -v 12582912 -n 256"  # 12 GiB of address space (in KiB) and 256 open files, hard and soft


@pytest.fixture(scope="session")
def bundles(tmp_path_factory):
    """bundle name -> its one grade (tests/staff/grader/grading.py, BUNDLES), graded when first asked for; the
    "timing" bundle's while a second grade keeps both cores busy."""
    graded: dict[str, Graded] = {}

    def get(bundle: str) -> Graded:
        if bundle not in graded:
            if bundle == "timing":  # its cases must hold on a busy machine: graded once, beside a second grade
                with second_grade_running(tmp_path_factory.mktemp("second-grade")):
                    graded[bundle] = grade_bundle(tmp_path_factory.mktemp(bundle), bundle, wait=240)
            else:
                graded[bundle] = grade_bundle(tmp_path_factory.mktemp(bundle), bundle)
        return graded[bundle]

    return get


@pytest.fixture(scope="session")
def part1_reference(tmp_path_factory) -> Graded:
    """The reference's whole part 1 (public and hidden tests) at world size 2, deadline 10 s, graded under
    `ulimit -v 12G -n 256` (a TA's shared machine or CI runner may start everything so): the reference's
    full-marks check, the low-limits check, and the baseline that a deadlocked submission's time is held to."""
    return grade(tmp_path_factory.mktemp("part1-reference"), {"collectives": REFERENCE, "accounting": ACCOUNTING},
                 parts="collectives",
                 deadline=10, test_timeout=240, timeout=600, memory_mb=None, shell_prefix=LOW_LIMITS,
                 wait=600)  # fmt: skip


@dataclass
class Batch:
    proc: subprocess.CompletedProcess
    folder: Path  # the batch folder; its results are in <folder>-results
    csv: Path
    results: dict[str, dict]  # submission -> its results.json


@pytest.fixture(scope="session")
def batch_of_reference_and_stub(tmp_path_factory) -> Batch:
    """``--batch`` over a folder (alice: the reference's collectives.py) and a zip (bob.zip: the untouched stub),
    two at once, broadcast and all_reduce at float32 (world size 2)."""
    tmp = tmp_path_factory.mktemp("batch")
    batch = tmp / "subs"
    (batch / "alice" / "cs336_systems").mkdir(parents=True)
    (batch / "alice" / "cs336_systems" / "collectives.py").write_text(REFERENCE)
    with zipfile.ZipFile(batch / "bob.zip", "w") as zf:
        zf.write(REPO / "cs336_systems" / "collectives.py", "cs336_systems/collectives.py")
    out_csv = tmp / "grades.csv"
    select = "(broadcast_copies_src_tensor_to_every_rank or all_reduce_sums_in_place_on_every_rank) and float32"
    select += " and not last"
    proc = subprocess.run(
        [sys.executable, "-m", "scripts.grading", "--batch", str(batch), "--csv", str(out_csv),
         "--jobs", "2", "--parts", "collectives", "--select", select, "--world-sizes", "2", "--timeout", "120"],
        cwd=REPO, env=grader_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    out = tmp / "subs-results"
    results = {p.stem + ("" if (batch / p.stem).is_dir() else ".zip"): json.loads(p.read_text())
               for p in out.glob("*.json") if not p.name.startswith("summary")}  # fmt: skip
    return Batch(proc, batch, out_csv, results)
