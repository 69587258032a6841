"""Check that the unmodified student stubs fail every test cleanly (CI and the release check).

    python -m scripts.release.check_stubs                    # tests/ against cs336_systems as shipped
    python -m scripts.release.check_stubs --root /tmp/release --impl student

"Cleanly" means: every collected test (other than those marked ``harness`` or ``staff``, which do
not exercise the student package) FAILS — no pass, no error at setup or collection (a skip needs a reason) —
its message carries the stub's ``NotImplementedError: Task p.t (...): see handouts/...``, and the
whole run ends in bounded time (no hang). Exit status 0 when all of that holds.
``judge_junit`` is the one judge of that rule; the student release's check uses it too.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

STUB_MESSAGE = re.compile(r"NotImplementedError: Task \d+\.\d+ \(.+\): see handouts/\S+\.md §\d+\.\d+")
CLEAN, PASSED, ERRORED, OTHER_FAILURE, SKIPPED, SKIPPED_SILENTLY = (
    "failed with the stub's message", "passed", "errored", "failed otherwise", "skipped", "skipped without a reason"
)  # fmt: skip
PROBLEMS = {
    PASSED: "PASSED against the stubs (does it test anything?)",
    ERRORED: "ERROR (not a clean failure)",
    OTHER_FAILURE: "failed without the stub's message",
    SKIPPED_SILENTLY: "skipped without a reason",
}


@dataclass(frozen=True)
class Verdict:
    test: str  # classname::name, as JUnit names it
    outcome: str  # one of the constants above
    message: str  # pytest's message for it (empty for a pass)

    @property
    def problem(self) -> str | None:
        """What is wrong with this test against the stubs, or None (a clean failure, or a skip with a reason)."""
        if self.outcome not in PROBLEMS:
            return None
        return f"{self.test}: {PROBLEMS[self.outcome]}" + (f": {self.message[:300]}" if self.message else "")


def judge_junit(path: Path) -> list[Verdict]:
    """Classify every test case of pytest's JUnit XML at ``path`` against the stub rule."""
    verdicts = []
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        failure, error, skipped = case.find("failure"), case.find("error"), case.find("skipped")
        if error is not None:
            verdicts.append(Verdict(name, ERRORED, error.get("message") or ""))
        elif skipped is not None:  # decided in the parent, with a reason (e.g. no GPU for world 8)
            reason = skipped.get("message") or ""
            verdicts.append(Verdict(name, SKIPPED if reason else SKIPPED_SILENTLY, reason))
        elif failure is None:
            verdicts.append(Verdict(name, PASSED, ""))
        else:
            message = failure.get("message") or ""
            clean = STUB_MESSAGE.search(message + (failure.text or ""))
            verdicts.append(Verdict(name, CLEAN if clean else OTHER_FAILURE, message))
    return verdicts


def run(root: Path, impl: str = "student", timeout: float = 1800, extra: list[str] = (), python: str = sys.executable):
    """Run ``tests`` under ``root`` against ``impl`` with ``python``; print the verdict. Returns the problems."""
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "junit.xml"
        cmd = [str(python), "-m", "pytest", "tests", f"--impl={impl}", "-m", "not harness and not staff",
               "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", "--tb=line", *extra]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith("CS336_")}
        start = time.monotonic()
        proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
        seconds = time.monotonic() - start
        if not junit.exists():
            print(proc.stdout[-5000:], proc.stderr[-5000:], sep="\n")
            return ["pytest wrote no report (collection crashed?)"]
        verdicts = judge_junit(junit)
    skips = sum(v.outcome == SKIPPED for v in verdicts)
    print(f"{len(verdicts)} tests ran against the stubs in {seconds:.0f} s ({skips} skipped with a reason)")
    problems = [v.problem for v in verdicts if v.problem] or ([] if verdicts else ["no test was collected"])
    for p in problems:
        print("  " + p)
    print("OK: every test fails cleanly with the stub's message" if not problems else f"FAIL: {len(problems)} problems")
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[2], help="the kit's folder")
    parser.add_argument("--impl", default="student", help="package holding the stubs (default: student)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds for the whole run")
    args, extra = parser.parse_known_args()
    sys.exit(1 if run(args.root, args.impl, args.timeout, extra) else 0)


if __name__ == "__main__":
    main()
