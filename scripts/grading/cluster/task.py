"""One array task of the cluster grader: grade a shard of the export, each submission exactly as ``--batch`` does.

Runs on a compute node (submitit unpickles ``GradeShard`` there and calls it). For each submission of its shard
that has no counted result (``store.py``), it runs ``python -m scripts.grading --batch`` over a folder holding
only that submission (a link to it), with the grader args given to ``submit``: the same grader, world sizes,
deadlines and budgets as a one-node batch, and the batch's own results JSON, staff log and CSV row. Then it moves
them into R (``Store.record``), so each result is there, whole, as soon as it is graded.

Preemption and time limits: ``GradeShard`` is submitit ``Checkpointable``: on Slurm's warning signal it is
requeued as it was, and the requeued task skips what is already graded. A cancelled task or a dead node is not
requeued: ``resubmit --missing`` grades what it left.
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

import submitit

from scripts.grading.cluster.store import REPO, Store
from scripts.grading.fingerprint import fingerprint_at
from scripts.tools.submission import PART_MODULES


def task_id() -> str:
    """``<array job>_<task>`` under Slurm (``local`` and the pid elsewhere)."""
    try:
        return submitit.JobEnvironment().job_id
    except RuntimeError:
        return f"local{os.getpid()}"


class NoResult(RuntimeError):
    """The batch ended normally without a result for the submission: the task goes on with the rest."""


class Interrupted(RuntimeError):
    """The batch was stopped by a signal (the task is cancelled, preempted or out of time): the task stops too,
    and the submission's running mark stays, so ``status`` calls it failed."""


def grade_in_batch(export: Path, name: str, scratch: Path, grader_args: list[str]) -> tuple[Path, dict]:
    """``--batch`` over a folder holding only ``name`` (a link: the batch resolves it to the export's path, so
    names and results are the export's). Returns the batch's results folder and its CSV row (as text)."""
    shutil.rmtree(scratch, ignore_errors=True)  # a grade a dead task left half done
    (scratch / "batch").mkdir(parents=True)
    (scratch / "batch" / name).symlink_to(export / name)
    results, row_csv = scratch / "results", scratch / "row.csv"
    cmd = [sys.executable, "-m", "scripts.grading", "--batch", str(scratch / "batch"), "--results-dir",
           str(results), "--csv", str(row_csv), *grader_args]  # fmt: skip
    code = subprocess.run(cmd, cwd=REPO, stdin=subprocess.DEVNULL, check=False).returncode  # its table: the log
    if code < 0 or code >= 128:  # killed, or ended by a signal (the grader exits 128 + signal): this task is ending
        raise Interrupted(f"the batch grading {name} was stopped by a signal (exit {code})")
    rows = list(csv.DictReader(row_csv.open())) if row_csv.exists() else []
    if len(rows) != 1 or not (results / f"{Path(name).stem}.json").exists():
        raise NoResult(f"the batch wrote no result for {name} (exit {code}; see this task's log)")
    return results, rows[0]


class GradeShard(submitit.helpers.Checkpointable):
    """The callable each array task runs: ``GradeShard()(results_dir, names)``. Requeued as is on preemption
    (``Checkpointable``: this object holds no progress; R does)."""

    def __call__(self, results_dir: str, names: list[str]) -> dict[str, str]:
        store = Store(Path(results_dir))
        config = store.config
        export, grader_args = Path(config["export"]), config["grader_args"]
        version, me = store.version, task_id()
        if version != config["grader_version"]:
            print(f"[cluster] warning: this checkout's grader version {version} is not the one submitted "
                  f"({config['grader_version']}): earlier results do not count, they are graded again",
                  flush=True)  # fmt: skip
        outcome = {}
        for name in names:
            if store.done(name):
                print(f"[cluster] {name}: already graded, skipped", flush=True)
                outcome[name] = "skipped"
                continue
            print(f"[cluster] {name}: grading (task {me})", flush=True)
            fp = fingerprint_at(export / name, PART_MODULES)  # kept only if the results record none
            store.mark_running(name, me)
            scratch = store.scratch(name, me)
            try:
                results, row = grade_in_batch(export, name, scratch, grader_args)
            except Interrupted:
                print(f"[cluster] {name}: this task is being stopped (cancelled, preempted or out of time: Slurm's "
                      "SIGTERM, exit 143); the grade in progress does not count; status shows it failed until "
                      "resubmit --missing (or the requeued task) grades it. The traceback below is expected.",
                      flush=True)  # fmt: skip
                raise
            except NoResult as exc:  # the rest of the shard still gets graded; status shows this one pending
                print(f"[cluster] {name}: {exc}", flush=True)
                store.unmark_running(name)
                outcome[name] = "no result"
                continue
            store.record(name, results, row, me, version, fp)
            for left in store.scratches(name):  # this grade's, and those a killed task left of it
                shutil.rmtree(left, ignore_errors=True)
            outcome[name] = f"graded: {row.get('score')} ({row.get('status')})"
            print(f"[cluster] {name}: {outcome[name]}", flush=True)
        return outcome
