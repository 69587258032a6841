"""Write the student release of the kit to OUT and check it (staff only).

    python scripts/make_student_release.py ../cs336-systems-release       # write and check
    python scripts/make_student_release.py OUT --no-check                 # write only

The release is every file git knows here (tracked, or new and not ignored) except the staff-only ones:
``reference_solutions/``, ``tests/staff/hidden/``, ``tests/staff/grader/``, ``tests/staff/mutants/``, the API-parity test,
the grader and its rubric (``scripts/grade.py``, ``scripts/grading/``), this script and
``handouts/grading.md``. ``pyproject.toml`` loses the reference package; README sections between
``<!-- staff -->`` and ``<!-- /staff -->`` are cut. Then the release is checked:
1. no staff file and no staff text: no line of the reference's code that the stubs do not share, no
   hidden test's name, no ``pytest.mark.staff``;
2. a fresh install works: a new virtual environment (reusing this one's dependencies, not this
   checkout) installs the release with pip;
3. ``pytest tests/`` there: tests marked ``harness`` pass, every other test fails with the stubs'
   ``NotImplementedError`` naming its handout section, and nothing errors at collection.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STAFF_PATHS = (
    "reference_solutions/", "tests/staff/hidden/", "tests/staff/grader/", "tests/staff/mutants/", "tests/staff/test_api_parity.py",
    "scripts/grade.py", "scripts/grading/", "scripts/make_student_release.py", "handouts/grading.md",
    "scripts/main.sh", ".ci/",
)  # fmt: skip
STAFF_SECTION = re.compile(r"<!-- staff -->.*?<!-- /staff -->\n?", re.S)


def release_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    return sorted(f for f in out.splitlines() if f and not f.startswith(STAFF_PATHS) and (REPO / f).is_file())


def write_release(out: Path) -> list[str]:
    if out.exists():
        shutil.rmtree(out)
    files = release_files()
    for rel in files:
        dest = out / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, dest)
    pyproject = out / "pyproject.toml"
    text = pyproject.read_text()
    pyproject.write_text(re.sub(r"packages = \[[^\]]*\]", 'packages = ["cs336_systems"]', text))
    readme = out / "README.md"
    if readme.exists():
        readme.write_text(STAFF_SECTION.sub("", readme.read_text()))
    return files


def staff_text() -> list[str]:
    """Lines that only staff files contain: the reference's own code and the hidden tests' names."""
    shared = {ln.strip() for p in (REPO / "cs336_systems").glob("*.py") for ln in p.read_text().splitlines()}
    ref = {ln.strip() for p in (REPO / "reference_solutions").glob("*.py") for ln in p.read_text().splitlines()}
    skip = ("#", '"""', "from ", "import ")
    lines = sorted(ln for ln in ref - shared if len(ln) >= 40 and not ln.startswith(skip))
    hidden = [m.group(1) for p in (REPO / "tests/staff/hidden").glob("*.py")
              for m in re.finditer(r"^def (test_\w+)", p.read_text(), re.M)]  # fmt: skip
    return lines, hidden + ["pytest.mark.staff"]


def check_no_staff_text(out: Path) -> list[str]:
    code_lines, names = staff_text()
    problems = [f"{rel} is staff-only" for rel in STAFF_PATHS if (out / rel).exists()]
    for p in out.rglob("*"):
        if p.is_file() and p.suffix in (".py", ".md", ".toml", ".txt", ".cfg", ".sh"):
            text = p.read_text(errors="replace")
            problems += [f"{p.relative_to(out)}: contains staff text {n!r}" for n in names if n in text]
            # One shared line can be a coincidence (a common idiom); three are pasted reference code.
            leaked = [ln for ln in code_lines if ln in text]
            if len(leaked) >= 3:
                problems.append(
                    f"{p.relative_to(out)}: contains {len(leaked)} lines of reference code, e.g. {leaked[:3]}"
                )
    return problems


def fresh_env(out: Path, tmp: Path) -> Path:
    """A new venv that sees this environment's dependencies but not this checkout, with the release installed."""
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    # A plain path line: the dependencies are importable, but this checkout's editable-install hook
    # (a .pth file in that folder) is not run, so only the release's cs336_systems can be found.
    Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", str(out)],
                   check=True, cwd=tmp)  # fmt: skip
    return python


def run_release_tests(python: Path, out: Path, tmp: Path) -> list[str]:
    problems = []
    cmd = [str(python), "-m", "pytest", "tests/", "-q", "-p", "no:cacheprovider", "--world-sizes", "1,2"]
    harness = subprocess.run([*cmd, "-m", "harness"], cwd=out, capture_output=True, text=True)
    if harness.returncode not in (0, 5):
        problems.append(f"harness tests fail in the release:\n{harness.stdout[-3000:]}")
    xml = tmp / "stubs.xml"
    stubs = subprocess.run([*cmd, "-m", "not harness", f"--junitxml={xml}"], cwd=out, capture_output=True, text=True)
    if not xml.exists():
        return problems + [f"pytest did not run:\n{stubs.stdout[-3000:]}{stubs.stderr[-2000:]}"]
    cases = list(ET.parse(xml).getroot().iter("testcase"))
    for case in cases:
        name = f"{case.get('classname')}::{case.get('name')}"
        failure = case.find("failure")
        if case.find("error") is not None:
            problems.append(f"{name}: errors instead of failing cleanly")
        elif case.find("skipped") is not None:
            continue
        elif failure is None:
            problems.append(f"{name}: passes against the stubs")
        elif not re.search(r"NotImplementedError: Task \d+\.\d+ .*handouts/", failure.get("message", "") +
                           (failure.text or "")):  # fmt: skip
            problems.append(f"{name}: fails without the stub's message: {failure.get('message', '')[:200]}")
    print(f"release: {len(cases)} non-harness tests ran against the stubs; {len(problems)} problem(s)")
    return problems


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path, help="folder to write the release to (replaced if it exists)")
    p.add_argument("--no-check", action="store_true", help="write the release without checking it")
    args = p.parse_args()
    out = args.out.resolve()
    if REPO in [out, *out.parents]:
        p.error("OUT must be outside this checkout")
    files = write_release(out)
    print(f"wrote {len(files)} files to {out}")
    if args.no_check:
        return 0
    problems = check_no_staff_text(out)
    with tempfile.TemporaryDirectory(prefix="cs336-release-") as tmp:
        python = fresh_env(out, Path(tmp))
        problems += run_release_tests(python, out, Path(tmp))
    for problem in problems:
        print("PROBLEM:", problem)
    print("release OK" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
