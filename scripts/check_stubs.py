"""Check that the unmodified student stubs fail every test cleanly (CI and the release check).

    python scripts/check_stubs.py                    # tests/ against cs336_systems as shipped
    python scripts/check_stubs.py --root /tmp/release --impl student

"Cleanly" means: every collected test (other than those marked ``harness`` or ``staff``, which do
not exercise the student package) FAILS — no pass, no error at setup or collection (a skip needs a reason) —
its message carries the stub's ``NotImplementedError: Task p.t (...): see handouts/...``, and the
whole run ends in bounded time (no hang). Exit status 0 when all of that holds.
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
from pathlib import Path

STUB_MESSAGE = re.compile(r"NotImplementedError: Task \d+\.\d+ \(.+\): see handouts/\S+\.md §\d+\.\d+")


def run(root: Path, impl: str, timeout: float, extra: list[str]) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "junit.xml"
        cmd = [sys.executable, "-m", "pytest", "tests", f"--impl={impl}", "-m", "not harness and not staff",
               "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", "--tb=line", *extra]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith("CS336_")}
        start = time.monotonic()
        proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
        seconds = time.monotonic() - start
        if not junit.exists():
            print(proc.stdout[-5000:], proc.stderr[-5000:], sep="\n")
            print("FAIL: pytest wrote no report (collection crashed?)")
            return 1
        cases = ET.parse(junit).getroot().iter("testcase")
        problems, total, skips = [], 0, 0
        for case in cases:
            total += 1
            name = f"{case.get('classname')}::{case.get('name')}"
            failure, error, skipped = case.find("failure"), case.find("error"), case.find("skipped")
            if error is not None:
                problems.append(f"{name}: ERROR (not a clean failure): {error.get('message', '')[:200]}")
            elif skipped is not None:  # decided in the parent, with a reason (e.g. no GPU for world 8)
                skips += 1
                if not skipped.get("message"):
                    problems.append(f"{name}: skipped without a reason")
            elif failure is None:
                problems.append(f"{name}: PASSED against the stubs (does it test anything?)")
            elif not STUB_MESSAGE.search((failure.get("message") or "") + (failure.text or "")):
                problems.append(f"{name}: failed without the stub's message: {(failure.get('message') or '')[:300]}")
    print(f"{total} tests ran against the stubs in {seconds:.0f} s ({skips} skipped with a reason)")
    if total == 0:
        problems.append("no test was collected")
    for p in problems:
        print("  " + p)
    print("OK: every test fails cleanly with the stub's message" if not problems else f"FAIL: {len(problems)} problems")
    return 1 if problems else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1], help="the kit's folder")
    parser.add_argument("--impl", default="student", help="package holding the stubs (default: student)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds for the whole run")
    args, extra = parser.parse_known_args()
    sys.exit(run(args.root, args.impl, args.timeout, extra))


if __name__ == "__main__":
    main()
