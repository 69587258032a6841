"""The grader and the rank workers respect the limits of the host they run on (staff only).

    pytest tests/staff/grader/test_host_limits.py -v

A TA's shared machine or a CI runner may start everything under ``ulimit -v 12G -n 256``: asking
``setrlimit`` for more than the inherited hard limit raises, which once failed every grade with
"The autograder failed". Every limit now goes through ``tests.harness.limits.cap``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.harness.pool import ROOT as REPO

pytestmark = pytest.mark.staff


def test_cap_takes_the_inherited_hard_limit_and_says_so():
    """cap() sets min(wanted, inherited hard limit) instead of raising, and logs that it had to clamp."""
    code = (
        "import resource\nfrom tests.harness.limits import cap\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (200, 200))\n"
        "print(cap(resource.RLIMIT_NOFILE, 4096))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"cap raised under a low hard limit:\n{proc.stderr}"
    assert proc.stdout.strip() == "200", f"expected the hard limit 200 to win, got {proc.stdout!r}"
    assert "RLIMIT_NOFILE" in proc.stderr and "using 200" in proc.stderr, f"no log of the clamp:\n{proc.stderr}"


def test_the_reference_gets_full_marks_under_low_inherited_limits(part1_reference):
    """Graded under `ulimit -v 12G -n 256`, the reference still gets full marks (all of part 1, world size 2,
    hidden tests included: tests/staff/grader/conftest.py's shared grade)."""
    results = part1_reference.results
    tests = results["tests"]
    assert tests, f"nothing graded under low limits:\n{json.dumps(results, indent=1)[:3000]}"
    failed = [f"{t['name']}: {t.get('output', '')[:300]}" for t in tests if t["score"] != t["max_score"]]
    assert not failed, "the reference lost points under `ulimit -v 12G -n 256`:\n" + "\n".join(failed)
    assert "not your fault" not in json.dumps(results), "the grader itself failed under low limits"
