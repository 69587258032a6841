"""Grading a class on a cluster: a job array through submitit, on a real one-node Slurm and on the local executor.

    python -m scripts.grading.cluster.local_slurm install       # once, as root (Debian): slurm-wlm and munge
    pytest tests/staff/grader/test_cluster.py -v

The oracle is a one-node ``--batch`` of the same export with the same grader args, graded here first: the
cluster's results must equal it entry by entry (each test's score and status), and ``collect`` must write the
same CSV (but the seconds), the same dashboard numbers and one results JSON per submission where
``gpu_results pack`` reads them. Four small submissions, Part 1 at world sizes 1 and 2
on gloo, a few tests each: the reference (full marks), the stub as a zip (0), a broadcast that returns at once
(only broadcast's cases fail) and a folder with no part module (0, with a note).

The first Slurm test runs the guide's cluster trial (handouts/grading.md, its cluster-trial block) as written:
``local_slurm install`` and ``start`` (``munged``, ``slurmctld`` and ``slurmd`` in a temporary folder,
scripts/grading/cluster/local_slurm.py), submits one array of four tasks (one submission each; the node takes one
exclusive task at a time), cancels the task grading one submission mid-grade, checks that ``status`` calls it
failed, resubmits what is missing and checks every submission graded exactly once (the grades log) with the
batch's grades, then ``stop``. A second Slurm test preempts as Slurm does: ``scontrol requeue`` kills a
one-task array mid-shard and queues it again; the rerun skips what it graded. They skip, saying why, where Slurm
is not installed or cannot start (not root, no Debian). sacct's and squeue's answers are also parsed from canned lines.
The local test needs no Slurm: two tasks on this machine, a half-written result that must not count, a second
``submit`` that grades nothing, and a changed submission that ``resubmit --missing`` grades again alone.

Everything runs from a snapshot of this checkout (its tracked and new files): a result counts only under the
grader version it was graded with (a hash of the grader's sources), and this checkout may change under the test.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cs336_systems import platform_support
from scripts.grading.cluster.__main__ import minutes
from scripts.grading.cluster.shards import plan_shards
from tests.harness.pool import ROOT as REPO
from tests.staff.grader import grader_env

pytestmark = pytest.mark.staff

SELECT = "(broadcast_copies_src_tensor_to_every_rank or all_reduce_sums_in_place_on_every_rank) and float32"
GRADER_ARGS = ["--parts", "collectives", "--world-sizes", "1,2", "--select", SELECT, "--timeout", "180"]
BROKEN_BROADCAST = "\n\ndef broadcast(tensor, src=0, group=None):\n    return tensor  # forgot to send\n"


def _cli(repo: Path, *args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", *args], cwd=repo, env=env or grader_env(), capture_output=True,
                          text=True, timeout=timeout)  # fmt: skip
    return proc


def _wait(what: str, done, timeout: float) -> None:
    """Poll ``done()`` (a cluster runs apart from this process: nothing to join) until it holds."""
    end = time.monotonic() + timeout
    while not done():
        if time.monotonic() > end:
            raise AssertionError(f"not within {timeout:.0f} s: {what}")
        time.sleep(0.5)


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """This checkout's tracked and new (not ignored) files, copied: a grader version that cannot change."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True,
                           check=True).stdout.decode().split("\0")  # fmt: skip
    copy = tmp_path_factory.mktemp("checkout") / "repo"
    for rel in filter(None, files):
        if (REPO / rel).is_file():
            (copy / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, copy / rel)
    return copy


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> Path:
    """alice: the reference; bob.zip: the stub; carol: broadcast returns at once; dan: no part module."""
    export = tmp_path_factory.mktemp("class") / "export"
    reference = (REPO / "reference_solutions" / "collectives.py").read_text()
    for name, source in (("alice", reference), ("carol", reference + BROKEN_BROADCAST)):
        (export / name / "cs336_systems").mkdir(parents=True)
        (export / name / "cs336_systems" / "collectives.py").write_text(source)
    (export / "dan").mkdir()
    (export / "dan" / "notes.txt").write_text("I ran out of time\n")
    shutil.make_archive(str(export / "bob"), "zip", REPO, "cs336_systems/collectives.py")
    return export


@pytest.fixture(scope="module")
def batch(repo, export, tmp_path_factory) -> Path:
    """The oracle: a one-node ``--batch`` of the export (two at a time), results and CSV in the folder returned."""
    out = tmp_path_factory.mktemp("one-node") / "results"
    proc = _cli(repo, "scripts.grading", "--batch", str(export), "--results-dir", str(out), "--csv",
                str(out / "grades.csv"), "--jobs", "2", *GRADER_ARGS, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return out


def _entries(results: dict) -> list[tuple]:
    return [(t["name"], t["score"], t["max_score"], t["status"]) for t in results["tests"]]


def _csv(path: Path) -> dict[str, dict]:
    """submission -> its CSV row, without the seconds (a grade's time) and the fingerprint (checked apart: a
    submission may have changed since the batch graded it)."""
    return {r["submission"]: {k: v for k, v in r.items() if k not in ("seconds", "fingerprint")}
            for r in csv.DictReader(path.open())}  # fmt: skip


def assert_same_as_batch(results: Path, batch: Path, names: list[str]) -> None:
    """Every submission's results equal the one-node batch's entry by entry; the CSV and the dashboard too."""
    for name in names:
        stem = Path(name).stem
        got, want = (json.loads((d / f"{stem}.json").read_text()) for d in (results, batch))
        assert got["score"] == want["score"], (
            f"{name}: score {got['score']} on the cluster, {want['score']} on one node"
        )
        assert _entries(got) == _entries(want), f"{name}: entries differ from the one-node batch's"
        assert (results / f"{stem}.staff.log").exists(), f"{name}: no staff log beside its results"
    want_rows = {n: r for n, r in _csv(batch / "grades.csv").items() if n in names}
    assert _csv(results / "grades.csv") == want_rows
    for row in csv.DictReader((results / "grades.csv").open()):  # the code each grade graded, as its results say
        graded = json.loads((results / f"{Path(row['submission']).stem}.json").read_text())["extra_data"]["graded"]
        assert row["fingerprint"] == graded["fingerprint"], row
    summary, oracle = (_dashboard(json.loads((d / "summary.json").read_text())) for d in (results, batch))
    if set(names) == {g["submission"] for g in oracle["grades"]}:
        assert summary == oracle, "the dashboard's numbers differ from the one-node batch's"
    for figure in ("summary.md", "dashboard.png", "grades.png"):
        assert (results / figure).exists(), f"collect wrote no {figure}"


def _dashboard(summary: dict) -> dict:
    """summary.json without each task's ``commonest_case``: summary.py breaks a tie there in a set's order, which
    Python's string hashing varies per process (two one-node batches of one export can differ there too); and
    without the path of the CSV it records (each folder's own)."""
    tasks = [{k: v for k, v in t.items() if k != "commonest_case"} for t in summary["tasks"]]
    return {**{k: v for k, v in summary.items() if k != "csv"}, "tasks": tasks}


def _graded_once(results: Path) -> Counter:
    """How many grades finished per submission (R/.cluster/graded.log: one line each)."""
    return Counter(line.split()[3] for line in (results / ".cluster" / "graded.log").read_text().splitlines())


# -- the pure helpers ------------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text("abcdef", min_size=1, max_size=3), st.sampled_from([10.0, 130.0, 310.0, 2000.0]),
                       max_size=25), st.integers(1, 9))  # fmt: skip
def test_shards_hold_each_submission_once_the_same_way_every_time_and_balanced(costs, shards):
    """Every submission in exactly one shard; the same shards whatever order the export lists them in; no shard
    heavier than the lightest by more than one submission's cost (longest first, into the lightest shard)."""
    plan = plan_shards(costs, shards)
    assert len(plan) == max(1, min(shards, len(costs)))
    assert sorted(n for shard in plan for n in shard) == sorted(costs)
    assert plan == plan_shards(dict(reversed(list(costs.items()))), shards), "the shards depend on the listing order"
    loads = [sum(costs[n] for n in shard) for shard in plan]
    assert not costs or max(loads) - min(loads) <= max(costs.values()), f"unbalanced: {loads}"


@pytest.mark.parametrize(("text", "expected"), [("90", 90), ("1:30", 2), ("2:00:00", 120), ("4:00:30", 241),
                                                ("1-00", 1440), ("1-2:30", 1590), ("0-0:0:1", 1)])  # fmt: skip
def test_time_takes_slurms_formats_in_whole_minutes_rounded_up(text, expected):
    assert minutes(text) == expected


SACCT = """41_0|COMPLETED|node1
41_1|CANCELLED by 0|node2
41_2|NODE_FAIL|node3
41_3|RUNNING|node1
41_[4-5%2]|PENDING|
41_6|REQUEUED|node2
"""


def _fake_slurm(tmp_path: Path, monkeypatch, sacct: str | None, squeue: str) -> None:
    """``sacct`` and ``squeue`` on PATH that print the given lines (``sacct`` None: no accounting, exit 1)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    for tool, text in (("sacct", sacct), ("squeue", squeue)):
        body = "exit 1" if text is None else f"cat <<'EOF'\n{text}EOF"
        (bin_dir / tool).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


def _store_with_array(tmp_path: Path, tasks: list[list[str]]):
    from scripts.grading.cluster.store import Store

    export = tmp_path / "export"
    for name in (n for shard in tasks for n in shard):
        (export / name).mkdir(parents=True)
    store = Store(tmp_path / "R")
    store.save_config({"export": str(export), "grader_args": GRADER_ARGS, "options": {"cluster": "slurm"}})
    store.add_array("41", [f"41_{k}" for k in range(len(tasks))], tasks, "submit")
    return store


def test_status_reads_sacct_states_nodes_and_pending_ranges(tmp_path, monkeypatch):
    """sacct's lines become each task's state and node: "CANCELLED by 0" is CANCELLED, a pending range
    ``41_[4-5%2]`` names tasks 4 and 5, a requeued task is still live; a submission whose task was cancelled
    while grading it is failed, one whose task ended without starting it pending for ``resubmit --missing``."""
    from scripts.grading.cluster import slurm

    _fake_slurm(tmp_path, monkeypatch, SACCT, squeue="")
    store = _store_with_array(tmp_path, [["a"], ["b"], ["c"], ["d"], ["e"], ["f"], ["g"]])
    store.mark_running("b", "41_1")
    states, nodes, source = slurm.task_states(store)
    assert source == "sacct"
    assert states == {"41_0": "COMPLETED", "41_1": "CANCELLED", "41_2": "NODE_FAIL", "41_3": "RUNNING",
                      "41_4": "PENDING", "41_5": "PENDING", "41_6": "REQUEUED"}  # fmt: skip
    assert nodes["41_2"] == "node3" and nodes["41_4"] == ""
    assert slurm.queued_names(store) == {"d", "e", "f", "g"}, "running, pending and requeued tasks still grade theirs"
    status = {n: slurm.submission_status(store, n, f"41_{k}", states) for k, n in enumerate("abcdefg")}
    assert status["b"] == "failed (task 41_1 cancelled while grading it)"
    assert status["a"] == "pending (task 41_0 ended without it: resubmit --missing)"
    assert status["c"].startswith("pending (task 41_2 ended")
    assert status["e"] == status["g"] == "pending"


def test_status_without_accounting_takes_the_queue_and_calls_the_rest_ended(tmp_path, monkeypatch):
    """No accounting (sacct fails, as on the test's one-node Slurm): squeue's tasks keep their state, a task the
    queue no longer lists has ENDED; nothing answering at all leaves every task UNKNOWN, saying so."""
    from scripts.grading.cluster import slurm

    _fake_slurm(tmp_path, monkeypatch, None, squeue="41_1|RUNNING|node1\n41_[2]|PENDING|\n")
    store = _store_with_array(tmp_path, [["a"], ["b"], ["c"]])
    states, nodes, source = slurm.task_states(store)
    assert source == "squeue (no accounting)"
    assert states == {"41_0": "ENDED", "41_1": "RUNNING", "41_2": "PENDING"} and nodes["41_1"] == "node1"
    _fake_slurm(tmp_path / "none", monkeypatch, None, squeue=None)
    states, _, source = slurm.task_states(store)
    assert source.startswith("no Slurm answered") and set(states.values()) == {"UNKNOWN"}


# -- on a real Slurm ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def slurm(tmp_path_factory) -> dict:
    """A one-node Slurm (local_slurm.py) for this module; the environment its clients need."""
    from scripts.grading.cluster import local_slurm

    if not shutil.which("slurmctld") and not Path("/usr/sbin/slurmctld").exists():
        pytest.skip("Slurm is not installed (as root on Debian: python -m scripts.grading.cluster.local_slurm install)")
    folder = tmp_path_factory.mktemp("slurm")
    try:
        env = local_slurm.start(folder)
    except local_slurm.SlurmUnavailable as exc:
        pytest.skip(f"a local Slurm could not start: {exc}")
    yield {**grader_env(), **env}
    local_slurm.stop(folder)


def _array_ended(env: dict, array: str) -> bool:
    out = subprocess.run(["squeue", "-h", "-r", "-j", array, "-o", "%i"], env=env, capture_output=True, text=True)
    return out.returncode != 0 or not out.stdout.strip()


def _array_of(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc.stdout.split("submitted job array ")[1].split(":")[0]


GUIDE = REPO / "handouts" / "grading.md"
TRIAL_STEPS = ["install", "start", "submit", "status", "scancel", "status", "resubmit", "status", "collect", "stop"]


def guide_trial() -> list[str]:
    """The commands of the guide's cluster trial (handouts/grading.md, between its cluster-trial markers), each on
    one line (continuations joined, comments dropped), as a TA would type them."""
    text = GUIDE.read_text()
    block = text.split("<!-- cluster-trial:begin -->", 1)[1].split("<!-- cluster-trial:end -->", 1)[0]
    commands, current = [], ""
    for raw in block.splitlines():
        line = re.sub(r"\s+#\s.*$", "", raw).strip()
        if not line:
            continue
        current = f"{current} {line.rstrip(chr(92)).strip()}".strip()
        if not line.endswith(chr(92)):
            commands.append(current)
            current = ""
    return commands


def _step(command: str) -> str:
    for kind in ("install", "start", "stop", "scancel", "resubmit", "submit", "status", "collect"):
        if re.search(rf"(^|[ .]){kind}\b", command):
            return kind
    return command


def test_slurm_the_guides_trial_runs_as_written(repo, export, batch, tmp_path):
    """The guide's cluster commands, read from handouts/grading.md and run as written (the trial's folders and the
    cancelled task's id put in) on a one-node Slurm: install, start, submit four submissions, status, cancel the
    task grading one mid-grade, status calls it failed and credits the task with nothing, resubmit --missing grades
    it alone, status shows all graded and no scratch folder is left, collect equals a one-node batch (the CSV and
    the dashboard too), the cancelled task's log says why it ends in a traceback, stop ends the daemons."""
    from scripts.grading.cluster import local_slurm

    if not shutil.which("slurmctld") and not Path("/usr/sbin/slurmctld").exists():
        pytest.skip("Slurm is not installed (as root on Debian: python -m scripts.grading.cluster.local_slurm install)")
    commands = guide_trial()
    assert [_step(c) for c in commands] == TRIAL_STEPS, f"the guide's trial changed; update this test:\n{commands}"
    submit_args = shlex.split(commands[2].split(" -- ", 1)[1])
    assert submit_args == GRADER_ARGS, "the guide's trial grades otherwise than the one-node batch compared with"
    folder, results = tmp_path / "slurm", tmp_path / "trial-results"
    env, meta, victim = grader_env(), results / ".cluster", {}

    def run(command: str, *, check: bool = True) -> subprocess.CompletedProcess:
        command = (command.replace("trial-results/", f"{results}/").replace("trial/", f"{export}/")
                   .replace("/tmp/cs336-slurm", str(folder)).replace("python -m", f"{sys.executable} -m"))  # fmt: skip
        if command.startswith("scancel"):
            command = f"scancel {victim['task']}"
        proc = subprocess.run(["bash", "-c", command], cwd=repo, env=env, capture_output=True, text=True, timeout=300)
        assert not check or proc.returncode == 0, f"{command}: exit {proc.returncode}\n{proc.stdout}{proc.stderr}"
        return proc

    def lines_about(out: str, text: str) -> list[str]:
        return [ln.strip() for ln in out.splitlines() if text in ln]

    try:
        run(commands[0])  # install: Slurm is there, so nothing to do
        started = run(commands[1].removeprefix('eval "$(').removesuffix(')"'), check=False)  # what eval runs
        if started.returncode:
            pytest.skip(f"a local Slurm could not start: {started.stderr[-500:]}")
        env.update(re.findall(r"^export (\w+)=(\S+)$", started.stdout, re.M))
        assert "SLURM_CONF" in env, started.stdout
        array = _array_of(run(commands[2]))
        _wait("a task grading", lambda: any((meta / "running").glob("*.json")), 240)
        seen = time.monotonic()
        victim.update(json.loads(sorted((meta / "running").glob("*.json"))[0].read_text()))
        name = next(n for n, t in zip(*_shards(meta)) if t == victim["task"])
        status = run(commands[3]).stdout
        assert lines_about(status, f"{name}: running") and "RUNNING" in status, status
        time.sleep(max(0.0, 3 - (time.monotonic() - seen)))  # a grade here takes 6-15 s: cancelled mid-grade
        run(commands[4])
        _wait(f"array {array} to end", lambda: _array_ended(env, array), 300)
        status = run(commands[5]).stdout
        assert lines_about(status, f"{name}: failed (task {victim['task']}"), status
        assert any("0/1 graded by it" in ln for ln in lines_about(status, victim["task"] + " ")), status
        assert not (results / f"{Path(name).stem}.json").exists(), "the cancelled grade left a result"
        again = run(commands[6])
        assert "1 to resubmit" in again.stdout, again.stdout + again.stderr
        second = _array_of(again)
        _wait(f"array {second} to end", lambda: _array_ended(env, second), 240)
        status = run(commands[7]).stdout
        assert "4 graded, 0 running, 0 pending, 0 failed" in status, status
        assert any("0/1 graded by it, 1 by a later task" in ln for ln in lines_about(status, victim["task"] + " "))
        assert not list((meta / "work").iterdir()), "a scratch folder was left behind"
        run(commands[8])
        names = sorted(p.name for p in export.iterdir())
        assert _graded_once(results) == Counter(names), "a submission was graded twice, or not at all"
        assert_same_as_batch(results, batch, names)
        logs = "".join(p.read_text() for p in meta.glob(f"logs/{victim['task']}/*_log.out"))
        assert "this task is being stopped" in logs and "exit 143" in logs, logs[-2000:]
        # gpu_results pack reads EXPORT/<name> and R/<stem>.json: the results compared above, one per submission.
        assert sorted(p.name for p in results.glob("*.json") if p.name != "summary.json") == sorted(
            f"{Path(n).stem}.json" for n in names
        )
        pids = {int(p.read_text().split()[0]) for p in folder.glob("*.pid") if p.read_text().strip()}
        assert len(pids) == 3 and pids <= set(platform_support.process_parents()), "munged, slurmctld, slurmd?"
        run(commands[9])
        assert not pids & set(platform_support.process_parents()), "stop left a daemon running"
    finally:
        local_slurm.stop(folder)


def _shards(meta: Path) -> tuple[list[str], list[str]]:
    """(submission, task id) of the first array, one pair per submission."""
    array = json.loads((meta / "arrays.json").read_text())[0]
    pairs = [(n, t) for t, shard in zip(array["task_ids"], array["tasks"]) for n in shard]
    return [n for n, _ in pairs], [t for _, t in pairs]


def test_slurm_requeued_task_skips_what_it_graded_before(slurm, repo, export, batch, tmp_path):
    """Preemption as Slurm does it: one task holds all four submissions; once it has graded one and started
    another, ``scontrol requeue`` kills it and queues it again under the same id. The rerun skips what counts,
    grades the rest (the interrupted one from the start), and no resubmit is needed: each graded once."""
    results = tmp_path / "R"
    cli = ("scripts.grading.cluster",)
    array = _array_of(_cli(repo, *cli, "submit", str(export), "--results-dir", str(results), "--nodes", "1",
                           "--time", "15", "--", *GRADER_ARGS, env=slurm))  # fmt: skip
    meta = results / ".cluster"
    _wait("a first grade and a second started",
          lambda: (meta / "graded.log").exists() and any((meta / "running").glob("*.json")), 240)  # fmt: skip
    first = (meta / "graded.log").read_text().split()[3]
    task = json.loads((meta / "arrays.json").read_text())[0]["task_ids"][0]
    time.sleep(2)
    subprocess.run(["scontrol", "requeue", task], env=slurm, check=True)

    # Slurm holds a requeued job back two minutes (its BeginTime), set once the killed run has ended; the test
    # releases it then (a preempted task's wait is the cluster's own).
    def held() -> bool:
        out = subprocess.run(["squeue", "-h", "-j", task, "-o", "%r"], env=slurm, capture_output=True, text=True)
        return out.stdout.strip() == "BeginTime"

    _wait("the requeued task held for its begin time", held, 60)
    subprocess.run(["scontrol", "update", f"JobId={task}", "StartTime=now"], env=slurm, check=True)
    _wait(f"array {array} to end", lambda: _array_ended(slurm, array), 300)
    names = sorted(p.name for p in export.iterdir())
    assert _graded_once(results) == Counter(names), "a submission was graded twice, or not at all"
    logs = "".join(p.read_text() for p in meta.glob("logs/**/*_log.out"))  # submitit's: both runs of the task
    assert f"{first}: already graded, skipped" in logs, f"the rerun did not skip {first}:\n{logs[-2000:]}"
    collected = _cli(repo, *cli, "collect", str(results), env=slurm)
    assert collected.returncode == 0, collected.stdout + collected.stderr
    assert_same_as_batch(results, batch, names)


# -- on the local executor ------------------------------------------------------------------------------------


def test_local_executor_skips_what_counts_and_regrades_what_does_not(repo, export, batch, tmp_path):
    """submitit's local executor, two tasks; a second submit grades nothing; then a half-written result and a
    one-byte change to a graded module each make a grade not count: resubmit --missing grades those two again."""
    from scripts.grading.fingerprint import fingerprint_at

    local = tmp_path / "export"
    for name in ("alice", "carol"):
        shutil.copytree(export / name, local / name)
    results = tmp_path / "R"
    cli = ("scripts.grading.cluster",)

    def submit(*args: str) -> subprocess.CompletedProcess:
        proc = _cli(repo, *cli, *args, "--results-dir", str(results), "--cluster", "local", "--nodes", "2", "--",
                    *GRADER_ARGS)  # fmt: skip
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc

    def wait_all_ended() -> None:
        tasks = [t for a in json.loads((results / ".cluster" / "arrays.json").read_text()) for t in a["task_ids"]]
        _wait("the local tasks to end", lambda: not set(map(int, tasks)) & set(platform_support.process_parents()), 240)

    submit("submit", str(local))
    config = json.loads((results / ".cluster" / "config.json").read_text())
    wait_all_ended()
    assert _graded_once(results) == Counter(["alice", "carol"])
    again = submit("submit", str(local))
    assert "2 submissions already graded" in again.stdout and "submitted job array" not in again.stdout
    # A result cut short (a task killed while writing it, by hand or by a bad disk) beside a record that matches,
    # and one changed byte in a graded module (another fingerprint): neither grade counts any more.
    (results / "alice.json").write_text('{"score": 7.0, "tests": [')
    module = local / "carol" / "cs336_systems" / "collectives.py"
    before = fingerprint_at(local / "carol", ["accounting", "collectives"])
    module.write_text(module.read_text() + "# a comment\n")
    assert fingerprint_at(local / "carol", ["accounting", "collectives"]) != before
    resubmitted = _cli(repo, *cli, "resubmit", str(results), "--missing", "--nodes", "2")
    assert "2 to resubmit" in resubmitted.stdout, resubmitted.stdout + resubmitted.stderr
    wait_all_ended()
    assert _graded_once(results) == Counter(["alice", "alice", "carol", "carol"])
    collected = _cli(repo, *cli, "collect", str(results))
    assert collected.returncode == 0, collected.stdout + collected.stderr
    assert config["grader_args"] == GRADER_ARGS
    assert_same_as_batch(results, batch, ["alice", "carol"])
