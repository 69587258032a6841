"""Grading as an unprivileged user, for real (staff only; needs root, as CI and Gradescope have).

    pytest tests/staff/grader/test_run_as.py -v

The grader runs as root; ``--run-as USER`` runs pytest and every rank as USER, with ``--python`` an
interpreter USER can run (this one lives under root's home, which USER cannot enter). The test makes
the user (``cs336grader``) and a grading venv that user can read (a copy of this venv re-pointed at
Debian's ``/usr/bin/python3.11``, the same minor version), hides the staff checkout from other users
for the duration, and grades part 6 twice: the reference (full marks), and a submission whose
``training_memory_bytes`` first tries to read the staff reference and the rubric, the judge's memory,
environment and pipes (the channel's signing key; the judge is undumpable), to write into the
checkout and next to the results, and raises "BREACH" if any of it worked; what it writes in /tmp (which
anyone may write) must be gone after the grade.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.harness.pool import ROOT as REPO
from tests.staff.grader import grader_env

pytestmark = pytest.mark.staff

USER = "cs336grader"
SYSTEM_PYTHON = Path("/usr/bin/python3.11")
GRADING_VENV = Path("/tmp/cs336-grading-venv")


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root (CI and Gradescope grade as root)"
    if not shutil.which("useradd"):
        return "needs useradd"
    if not SYSTEM_PYTHON.exists() or f"{sys.version_info.major}.{sys.version_info.minor}" != "3.11":
        return "needs /usr/bin/python3.11 of the same minor version as this interpreter"
    return None


@pytest.fixture(scope="module")
def grading_python() -> str:
    why = _why_not()
    if why:
        pytest.skip(why)
    if subprocess.run(["id", "-u", USER], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", USER], check=True)
    if not (GRADING_VENV / "bin" / "python").exists():  # a copy of this venv the user can read and run
        shutil.copytree(Path(sys.prefix), GRADING_VENV, symlinks=True)
        cfg = GRADING_VENV / "pyvenv.cfg"
        lines = [ln for ln in cfg.read_text().splitlines() if not ln.startswith(("home", "executable", "version"))]
        cfg.write_text("\n".join([f"home = {SYSTEM_PYTHON.parent}", f"executable = {SYSTEM_PYTHON}", *lines]) + "\n")
        (GRADING_VENV / "bin" / "python3").unlink()
        (GRADING_VENV / "bin" / "python3").symlink_to(SYSTEM_PYTHON)
        subprocess.run(["chmod", "-R", "a+rX", str(GRADING_VENV)], check=True)
    return str(GRADING_VENV / "bin" / "python")


@pytest.fixture
def hidden_checkout():
    """The staff checkout unreadable by other users while the test grades (as on Gradescope)."""
    mode = REPO.stat().st_mode & 0o777
    REPO.chmod(mode & ~0o007)
    try:
        yield
    finally:
        REPO.chmod(mode)


def _grade(tmp_path: Path, source: str, python: str) -> dict:
    sub = tmp_path / "submission" / "cs336_systems"
    sub.mkdir(parents=True)
    (sub / "accounting.py").write_text(source)
    out = tmp_path / "results" / "results.json"
    cmd = [sys.executable, "-m", "scripts.grading", str(sub.parent), "--out", str(out), "--parts", "accounting",
           "--world-sizes", "1", "--run-as", USER, "--python", python]  # fmt: skip
    env = grader_env()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert out.exists(), proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def probed_grade(tmp_path_factory, grading_python) -> tuple[dict, list[Path], Path]:
    """One grade, as cs336grader with the grading venv and the staff checkout hidden from other users, of the
    reference's accounting.py whose ``training_memory_bytes`` first probes: it tries to read the reference and
    the rubric, the judge's memory, environment and pipes, to write into the checkout and beside the results,
    and raises "BREACH" if any of it worked; otherwise it plants a file in /tmp and answers as the reference.
    Returns the results, the paths it tried to write and the file it planted."""
    tmp_path = tmp_path_factory.mktemp("run-as")
    reads = [REPO / "reference_solutions" / "accounting.py", REPO / "scripts" / "grading" / "rubric.toml",
             REPO / "tests" / "staff" / "hidden" / "test_accounting_hidden.py"]  # fmt: skip
    writes = [REPO / "pwned-by-submission", tmp_path / "results" / "pwned-by-submission"]
    planted = Path("/tmp/cs336-planted-by-submission")  # /tmp is writable by anyone: removed after the run
    attack = f"""

import os

_reference_training_memory_bytes = training_memory_bytes


def training_memory_bytes(num_params, **kw):
    done = []
    for path in {[str(p) for p in reads]!r}:
        try:
            open(path).read(64)
            done.append("read " + path)
        except OSError:
            pass
    for path in {[str(p) for p in writes]!r}:
        try:
            open(path, "w").write("x")
            done.append("wrote " + path)
        except OSError:
            pass
    # The judges: the rank's parent, and above it pytest when the parent is the zygote that forked the rank
    # (tests/harness/zygote.py). The channel's signing key lives only in pytest's memory and its pipes.
    judges = [os.getppid()]
    judges.append(int(open("/proc/%d/stat" % judges[0]).read().rsplit(")", 1)[1].split()[1]))
    for judge in judges:
        for path in ["/proc/%d/mem" % judge, "/proc/%d/environ" % judge]:
            try:
                open(path, "rb").close()  # opening is enough: /proc/PID/mem is then read at mapped addresses
                done.append("opened " + path)
            except OSError:
                pass
        try:
            done.append("listed the pipes of judge %d: %s" % (judge, os.listdir("/proc/%d/fd" % judge)))
        except OSError:
            pass
    if done:
        raise ValueError("BREACH: " + "; ".join(done))
    open({str(planted)!r}, "w").write("left behind")
    return _reference_training_memory_bytes(num_params, **kw)
"""
    (tmp_path / "results").mkdir(parents=True)
    mode = REPO.stat().st_mode & 0o777
    REPO.chmod(mode & ~0o007)  # as hidden_checkout, for the one grade
    try:
        source = (REPO / "reference_solutions" / "accounting.py").read_text() + attack
        results = _grade(tmp_path, source, grading_python)
    finally:
        REPO.chmod(mode)
    return results, writes, planted


def test_the_reference_gets_full_marks_as_an_unprivileged_user(probed_grade):
    """Graded as cs336grader with the grading venv, the reference gets full marks, hidden test included (the
    reference with the probe of the next test, which changes no answer unless it breaches)."""
    results = probed_grade[0]
    most = sum(t["max_score"] for t in results["tests"])
    assert results["score"] == pytest.approx(most, abs=0.01) and most > 0, results["output"]
    assert any(t["name"].endswith("(hidden test)") for t in results["tests"]), [t["name"] for t in results["tests"]]


def test_the_submission_cannot_read_staff_files_or_write_outside_its_sandbox(probed_grade):
    """From a rank, reading the reference or the rubric, the judge's memory, environment or pipes (where the
    signing key is), and writing into the checkout or the results folder all fail."""
    results, writes, planted = probed_grade
    assert "BREACH" not in json.dumps(results), json.dumps(results)[:3000]
    assert not any(p.exists() for p in writes), [p for p in writes if p.exists()]
    assert not planted.exists(), "a file the submission wrote in /tmp outlived the grade"
    most = sum(t["max_score"] for t in results["tests"])
    assert results["score"] == pytest.approx(most, abs=0.01), results["output"]


@pytest.fixture
def open_folder():
    """A folder under /tmp that every user can read (pytest's own tmp_path is root-only)."""
    folder = Path(tempfile.mkdtemp(prefix="cs336-open-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _refusal(cmd: list[str]) -> subprocess.CompletedProcess:
    env = grader_env()
    return subprocess.run([sys.executable, "-m", "scripts.grading", *cmd], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip


def test_a_rubric_the_user_can_read_stops_the_grade(tmp_path, grading_python, hidden_checkout, open_folder):
    """Staff files the grading user could read (here a rubric in an open folder) make the grade refuse to start."""
    rubric = open_folder / "rubric.toml"
    shutil.copy(REPO / "scripts" / "grading" / "rubric.toml", rubric)
    rubric.chmod(0o644)
    sub = tmp_path / "submission" / "cs336_systems"
    sub.mkdir(parents=True)
    (sub / "accounting.py").write_text((REPO / "reference_solutions" / "accounting.py").read_text())
    out = tmp_path / "results.json"
    _refusal([str(sub.parent), "--out", str(out), "--parts", "accounting", "--rubric", str(rubric), "--run-as", USER,
              "--python", grading_python])  # fmt: skip
    results = json.loads(out.read_text())
    assert results["score"] == 0 and "autograder failed" in results["output"], results["output"]
    assert f"that user can read {rubric}" in results["output"], results["output"]


def test_a_batch_the_user_can_read_is_not_graded(grading_python, hidden_checkout, open_folder):
    """With --run-as, a batch folder other users can read (each submission could read the others) is refused."""
    batch = open_folder / "submissions"
    (batch / "alice" / "cs336_systems").mkdir(parents=True)
    for p in [batch, *batch.rglob("*")]:
        p.chmod(0o755)
    proc = _refusal(["--batch", str(batch), "--parts", "accounting", "--run-as", USER, "--python", grading_python])
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"that user can read {batch}" in proc.stderr, proc.stderr[-2000:]
