"""The cluster grader's results folder R: what is graded, what is running, which arrays were submitted.

    R/<stem>.json, R/<stem>.staff.log    each submission's results and staff log, exactly as ``--batch`` writes
                                         them (``gpu_results pack EXPORT R`` and the dashboard read them there)
    R/.cluster/config.json               the export, the grader args and the Slurm options (for ``resubmit``)
    R/.cluster/arrays.json               every job array submitted: its id and each task's submissions
    R/.cluster/done/<stem>.json          the proof a result counts: the graded modules' fingerprint, the grader
                                         version, the batch's CSV row, the task that graded it
    R/.cluster/running/<stem>.json       a task is grading it now (or was, when its task died)
    R/.cluster/graded.log                one line per finished grade (a submission graded twice shows twice)
    R/.cluster/work/, R/.cluster/logs/   each grade's scratch folder; submitit's logs, one per task

A result counts only when its ``done`` record and its results JSON are both there, the record's fingerprint is
that of the submission's graded modules now (the kit's one fingerprint, scripts/grading/fingerprint.py, over the
modules the grade took from the submission: what its results record and the key Gradescope's lookup uses) and
its grader version is that of the checkout reading it (``grader_version``: the grader's sources and arguments).
The results JSON is moved in (one rename) before the record, so a task killed at any moment leaves either a
counted result or none: a half-written result never counts.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import time
from pathlib import Path

from scripts.grading.fingerprint import fingerprint_at
from scripts.grading.summary import STAFF_LOG
from scripts.tools.submission import PART_MODULES

REPO = Path(__file__).resolve().parents[3]
TASK_ID = re.compile(r"\d+(_\d+)?|local\d+")  # a Slurm array task (4711_3), a job, or a local task
# What decides a grade besides the submission: the grader, its rubric and tests, the given code. The cluster
# package itself is left out: a fix to `status` must not throw away a class's grades.
GRADER_SOURCES = ("scripts/grading", "tests", "cs336_systems")


def grader_version(grader_args: list[str]) -> str:
    """SHA-256 (16 hex digits) of the grader's sources in this checkout and of the grader arguments."""
    h = hashlib.sha256(json.dumps(grader_args).encode())
    for top in GRADER_SOURCES:
        for path in sorted((REPO / top).rglob("*")):
            rel = path.relative_to(REPO).as_posix()
            if (
                path.suffix in (".py", ".toml")
                and "__pycache__" not in rel
                and not rel.startswith("scripts/grading/cluster")
            ):
                h.update(f"{rel}\0".encode() + path.read_bytes())
    return h.hexdigest()[:16]


def write_atomic(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def _read(path: Path, default=None):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return default


class Store:
    def __init__(self, results: Path):
        self.root = results.resolve()
        self.meta = self.root / ".cluster"

    # -- configuration and arrays ---------------------------------------------------------------------
    @property
    def config(self) -> dict:
        config = _read(self.meta / "config.json")
        if config is None:
            raise SystemExit(f"{self.root} holds no cluster grading (no .cluster/config.json): run `submit` first")
        return config

    def save_config(self, config: dict) -> None:
        write_atomic(self.meta / "config.json", config)

    @property
    def arrays(self) -> list[dict]:
        return _read(self.meta / "arrays.json", [])

    def add_array(self, job_id: str, task_ids: list[str], tasks: list[list[str]], kind: str) -> None:
        """``task_ids``: each task's job id (``<array>_<k>`` on Slurm, a pid with the local executor)."""
        array = {"job_id": job_id, "kind": kind, "cluster": self.config["options"]["cluster"], "task_ids": task_ids,
                 "tasks": tasks, "submitted": time.strftime("%F %T")}  # fmt: skip
        write_atomic(self.meta / "arrays.json", [*self.arrays, array])

    @functools.cached_property
    def version(self) -> str:
        """This checkout's grader version for the submitted grader args: only its results count."""
        return grader_version(self.config["grader_args"])

    @property
    def logs(self) -> Path:
        return self.meta / "logs"

    # -- per submission -------------------------------------------------------------------------------
    def results_path(self, name: str) -> Path:
        return self.root / f"{Path(name).stem}.json"

    def done(self, name: str) -> dict | None:
        """The record of a result that counts now (see the module's docstring), else None."""
        record = _read(self.meta / "done" / f"{Path(name).stem}.json")
        if not record or record.get("submission") != name or _read(self.results_path(name)) is None:
            return None
        if record.get("grader") != self.version:
            return None
        modules = record.get("modules") or PART_MODULES
        if record.get("fingerprint") != fingerprint_at(Path(self.config["export"]) / name, modules):
            return None
        return record

    def running(self, name: str) -> dict | None:
        return _read(self.meta / "running" / f"{Path(name).stem}.json")

    def mark_running(self, name: str, task: str) -> None:
        write_atomic(self.meta / "running" / f"{Path(name).stem}.json",
                     {"task": task, "host": os.uname().nodename, "started": time.strftime("%F %T")})  # fmt: skip

    def unmark_running(self, name: str) -> None:
        (self.meta / "running" / f"{Path(name).stem}.json").unlink(missing_ok=True)

    def scratch(self, name: str, task: str) -> Path:
        return self.meta / "work" / f"{Path(name).stem}.{task}"

    def scratches(self, name: str) -> list[Path]:
        """Every task's scratch folder of ``name`` (a cancelled task leaves its own behind), and no other's."""
        stem = Path(name).stem
        work = self.meta / "work"
        found = work.iterdir() if work.is_dir() else []
        return [p for p in found if p.name.startswith(f"{stem}.") and TASK_ID.fullmatch(p.name[len(stem) + 1 :])]

    def record(self, name: str, graded: Path, row: dict, task: str, version: str, fp: str) -> None:
        """Move a finished grade (``graded``: the batch's results folder in the scratch) into R: the staff log,
        then the results JSON, then the record that makes it count (each one rename, same file system). The
        record keeps the fingerprint the results recorded of the code they graded (``fp``, read from the export
        before grading, when they record none: a submission that could not be read)."""
        stem = Path(name).stem
        code = (_read(graded / f"{stem}.json", {}).get("extra_data") or {}).get("graded") or {}
        fp, modules = code.get("fingerprint", fp), code.get("modules")
        log = graded / f"{stem}{STAFF_LOG}"
        if log.exists():
            os.replace(log, self.root / log.name)
        os.replace(graded / f"{stem}.json", self.results_path(name))
        write_atomic(self.meta / "done" / f"{stem}.json", {"submission": name, "fingerprint": fp, "modules": modules,
                                                            "grader": version, "row": row, "task": task,
                                                            "finished": time.strftime("%F %T")})  # fmt: skip
        self.unmark_running(name)
        with open(self.meta / "graded.log", "a") as f:  # one short append: whole lines even from several nodes
            f.write(f"{time.strftime('%F %T')} {task} {name} score={row.get('score')} {row.get('status')}\n")
