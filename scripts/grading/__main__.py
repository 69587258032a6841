"""Grade student submissions against the public and hidden tests; write Gradescope's results.json.

Run from the repository root, as a module (imports are ``scripts.grading.*`` and ``tests.harness.*``):

    python -m scripts.grading submission.zip --out results.json          # one submission (zip or folder)
    python -m scripts.grading sub/ --out r.json --parts collectives      # only part 1
    python -m scripts.grading sub/ --out r.json --backend nccl --world-sizes 2,4,8   # on an 8-GPU node
    python -m scripts.grading --batch submissions/ --csv grades.csv --jobs 1         # every submission in a folder

How (details in handouts/grading.md and scripts/grading/*.py): the submission's part modules are
read (never extracted) and placed, with the staff tests and the staff copies of the given helpers, in
a private sandbox where ``reference_solutions`` cannot be imported. pytest runs there with the
student implementation; student code runs only in the rank processes. Each test's outcome comes back
over a signed pipe that the submission cannot write; a crash, hang or kill costs the test it hit,
and the rest still run. Points come from scripts/grading/rubric.toml.
"""

from __future__ import annotations

import argparse
import functools
import glob
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from scripts.grading.fingerprint import UPLOAD, fingerprint_of, graded_record, read_graded
from scripts.grading.gpu_results import lookup
from scripts.grading.progress import Progress
from scripts.grading.rubric import DEFAULT_TIMEOUT_S, RUBRIC_PATH, Rubric, load_rubric, score, tasks_of, visibility
from scripts.grading.runner import RunRecord, Settings, check_run_as, kill_descendants, run_tests
from scripts.grading.sandbox import StaffFiles, SubmissionError, graded_modules, keep_graded, kit_submission
from scripts.grading.staff import path_of
from scripts.grading.summary import (
    STAFF_LOG,
    SUMMARY_JSON,
    grade_row,
    headline,
    read_results,
    refresh,
    write_grades_csv,
    write_summary,
)
from tests.harness import defaults
from tests.harness.limits import become_subreaper, die_with_parent

REPO = Path(__file__).resolve().parents[2]
HIDDEN_TESTS = path_of("hidden")  # tests/staff/hidden/: only the hidden run's sandbox holds them


def _test_files(rubric: Rubric, staff: StaffFiles) -> list[str]:
    return [f for f in staff.test_files() if rubric.part_of(f) is not None]


def _entry_output(entry, limit: int) -> str:
    counted, failed = entry.counted, [c for c in entry.cases if c[1] not in ("passed", "skipped")]
    lines = [f"{entry.passed} of {len(counted)} cases passed." if counted else "All cases were skipped."]
    if entry.doc:
        lines.insert(0, entry.doc)
    if entry.pool == "public":
        lines.append(f"Run it: pytest {entry.file} -k {entry.function}")
    for nodeid, _, reason in entry.cases:
        if _ == "skipped":
            lines.append(f"skipped (not counted): {nodeid.split('::')[-1]}: {reason}")
    if failed:
        nodeid, _, text = failed[0]
        lines.append(f"\n--- {nodeid.split('::')[-1]} ---\n{text.strip()}")
        if len(failed) > 1:
            lines.append("\nAlso failing: " + ", ".join(c[0].split("::")[-1] for c in failed[1:]))
    out = "\n".join(lines)
    return out if len(out) <= limit else out[: limit - 40] + "\n... (truncated)"


def file_alias(file: str, pool: str) -> str:
    """How results name a test file: a public one by its path, a hidden one by an alias (``hidden-`` and 12 hex
    digits of its path's SHA-256), since results.json must not name hidden files; ``_hidden_files`` resolves it."""
    return file if pool == "public" else "hidden-" + hashlib.sha256(file.encode()).hexdigest()[:12]


def entry_id(file: str, function: str, pool: str = "public") -> str:
    """An entry's stable id, the key a regrade merges by: its test function's pytest node id
    (``tests/test_ddp.py::test_x``; a hidden file by its alias). A bare function name is not one: 15 parts share
    ``test_bad_input_raises_on_every_rank_before_communicating``, and parts 1 and 5 have two each."""
    return f"{file_alias(file, pool)}::{function}"


def _case_rows(entry, markers: dict[str, list[str]], limit: int) -> list[list]:
    """Every case of an entry, for the dashboard and for a later regrade's merge: [case id, its task(s), outcome,
    failure headline, node id (a hidden file by its alias), failure text]. The text is cut to ``limit`` (what the
    entry's output can show)."""
    alias = file_alias(entry.file, entry.pool)
    return [[nodeid.split("::")[-1].partition("[")[2][:-1], sorted(tasks_of(markers.get(nodeid, []),
             entry.part.number)), outcome, headline(text) if outcome != "passed" else "",
             alias + nodeid.removeprefix(entry.file), text.strip()[:limit] if outcome != "passed" else ""]
            for nodeid, outcome, text in entry.cases]  # fmt: skip


def build_results(rubric: Rubric, record: RunRecord, notes: list[str], seconds: float,
                  settings: dict | None = None, graded: dict | None = None) -> dict:  # fmt: skip
    """Gradescope's results.json. ``extra_data`` keeps what the dashboard and a later ``--merge-into`` need: each
    entry's id and every case with its outcome and text (``entries``), the notes, ``settings`` (backend and
    world sizes the tests ran with) and ``graded``: the code graded (``fingerprint.graded_record``: its
    fingerprint, each file's hash, the modules taken from the submission; absent when it could not be read)."""
    entries, warnings = score(rubric, record.items, record.outcomes)
    markers = {item["nodeid"]: item.get("markers", []) for item in record.items}
    tests, per_part, dashboard = [], {}, []
    counters: dict[int, int] = {}
    for e in entries:
        # For the batch dashboard (scripts/grading/summary.py) and the merge: tasks, every case and its failure.
        dashboard.append({"id": entry_id(e.file, e.function, e.pool), "name": e.function, "part": e.part.number,
                          "pool": e.pool, "doc": e.doc, "tasks": sorted(e.tasks), "passed": e.passed,
                          "cases": len(e.counted),
                          "case_results": _case_rows(e, markers, rubric.max_output_chars)})  # fmt: skip
        counters[e.part.number] = counters.get(e.part.number, 0) + 1
        tests.append({
            "name": e.function + (" (hidden test)" if e.pool == "hidden" else ""),
            # "P2-T03": part 2's third test; never "2.3", which reads as the handout's task 2.3
            "number": f"P{e.part.number}-T{counters[e.part.number]:02d}",
            "score": round(e.score, 3), "max_score": round(e.max_score, 3),
            "status": "passed" if e.counted and e.passed == len(e.counted) else "failed",
            "visibility": visibility(rubric, e), "tags": [e.part.name],
            "output": _entry_output(e, rubric.max_output_chars),
        })  # fmt: skip
        got, most = per_part.get(e.part.name, (0.0, 0.0))
        per_part[e.part.name] = (got + e.score, most + e.max_score)
    total, most = round(sum(e.score for e in entries), 3), round(sum(e.max_score for e in entries), 3)
    summary = [f"Score: {total} / {most}  (graded in {seconds:.0f} s)"]
    summary += [f"  part {rubric.parts[n].number} {n}: {g:.2f} / {m:.2f}  ({record.spent.get(n, 0.0):.0f} s of its "
                f"{rubric.parts[n].budget_s:.0f} s budget)" for n, (g, m) in per_part.items()]  # fmt: skip
    all_notes = list(dict.fromkeys(notes + record.notes))
    summary += [f"Note: {n}" for n in all_notes]
    return {
        "score": total, "execution_time": round(seconds, 1), "output": "\n".join(summary),
        "output_format": "text", "stdout_visibility": "hidden", "tests": tests,
        "extra_data": {"parts": {n: [round(g, 3), round(m, 3)] for n, (g, m) in per_part.items()},
                       "seconds": {n: round(t, 1) for n, t in record.spent.items()},
                       "warnings": warnings, "restarts": record.restarts, "notes": all_notes,
                       "settings": settings or {}, **({"graded": graded} if graded else {}),
                       "entries": dashboard},
    }  # fmt: skip


class MergeError(ValueError):
    """A regrade that cannot be folded into the earlier results without losing or mixing grades."""


def _hidden_files(kit: Rubric) -> dict[str, str]:
    """{alias: path} of the kit's hidden test files, on this machine (the staff checkout, or the zip's source)."""
    found = (f for p in kit.parts.values() for pat in p.hidden_files for f in glob.glob(pat, root_dir=REPO))
    return {file_alias(f, "hidden"): f for f in found}


def _record_of(results: dict, which: str, hidden: dict[str, str]) -> RunRecord:
    """The cases a results JSON holds, as the grader collected and ran them (``build_results`` writes them);
    ``hidden``: {alias: path} of the hidden test files."""
    entries = results.get("extra_data", {}).get("entries", [])
    if not entries or not all("id" in e and all(len(row) == 6 for row in e.get("case_results", ())) for e in entries):
        raise MergeError(f"the {which} results do not list their cases by id (written by an older grader, or the "
                         "grade failed): grade the whole submission again instead")  # fmt: skip
    record = RunRecord(spent=dict(results["extra_data"].get("seconds", {})))
    record.restarts = results["extra_data"].get("restarts", 0)
    for e in entries:
        alias, _, function = e["id"].rpartition("::")
        file = hidden.get(alias, alias)
        if e.get("pool") == "hidden" and alias not in hidden:
            raise MergeError(f"the {which} results hold a hidden test file ({alias}) that this kit lacks")
        for _case, tasks, outcome, _head, aliased, text in e["case_results"]:
            nodeid = file + aliased.removeprefix(alias)
            markers = [f"task{t.replace('.', '_')}" for t in tasks]
            record.items.append({"nodeid": nodeid, "file": file, "function": function, "markers": markers,
                                 "doc": e.get("doc", "")})  # fmt: skip
            record.outcomes[nodeid] = (outcome, text)
    return record


EARLIER = "(earlier grade) "


def _settings_differ(before: dict | None, after: dict) -> str | None:
    """How two grades' settings (backend, world sizes, device-faithful mode) differ, as the options to give; None
    when they are the same."""
    if before == after:
        return None
    if not before:
        return "the earlier results record no settings (an older grader's): grade the whole submission again"
    options = {"backend": "--backend", "world_sizes": "--world-sizes", "device_faithful": "--device-faithful"}
    differ = [f"{options.get(k, k)} {before.get(k, 'unrecorded')} (the regrade: {after.get(k, 'unrecorded')})"
              for k in sorted(set(before) | set(after)) if before.get(k) != after.get(k)]  # fmt: skip
    return ("the earlier grade ran with " + "; ".join(differ) + ": regrade with the earlier grade's --backend, "
            "--world-sizes and --device-faithful/--no-device-faithful")  # fmt: skip


def _merged_code(before: dict | None, after: dict | None) -> dict:
    """The graded-code record of a merge (``fingerprint.graded_record`` of both grades' files together), or
    ``MergeError`` when the regrade took other bytes from the submission than the earlier grade for a module both
    took: one results file must name one submission's code."""
    if not before or "files" not in before:
        raise MergeError("the earlier results record no fingerprint of the code they graded (an older grader's): "
                         "grade the whole submission again instead")  # fmt: skip
    if not after or "files" not in after:
        raise MergeError("the regrade could not read the submission (see its notes): nothing to merge")

    def modules(code: dict) -> set[str]:  # those it took from the submission (at least those it has files of)
        return set(code.get("modules") or ()) | {n.removesuffix(".py") for n in code["files"]}

    differ = []
    for module in sorted(modules(before) & modules(after)):
        name = f"{module}.py"
        was, now = before["files"].get(name), after["files"].get(name)
        if was != now:
            differ.append(f"{name} " + ("is new" if was is None else "is gone" if now is None else
                                        f"differs (sha256 {was[:12]} graded, {now[:12]} now)"))  # fmt: skip
    if differ:
        raise MergeError(
            f"the regrade's submission is not the code the earlier grade graded ({', '.join(differ)}; "
            f"earlier fingerprint {before['fingerprint'][:16]}): regrade the same bytes (the export "
            "the earlier grade read), or grade the new submission whole, without --merge-into"
        )
    files = {**before["files"], **after["files"]}
    return {"fingerprint": fingerprint_of(files), "files": files,
            "modules": sorted(modules(before) | modules(after))}  # fmt: skip


def check_merge(old: dict, settings: dict, parts: list[str], graded: dict | None) -> None:
    """Before any test runs: ``MergeError`` unless a regrade with these settings, of these rubric entries
    (``parts``), of this code (``graded``) can be folded into ``old``: the same backend, world sizes and
    device-faithful mode, parts that the earlier grade graded, the same bytes for every module both take, and
    earlier results that list their cases."""
    extra = old.get("extra_data") or {}
    problem = _settings_differ(extra.get("settings"), settings)
    if problem:
        raise MergeError(problem)
    earlier = list(extra.get("parts") or {})
    beyond = [p for p in parts if p not in earlier]
    if beyond:
        raise MergeError(f"the regrade would grade {', '.join(beyond)}, which the earlier grade did not (it graded "
                         f"{', '.join(earlier) or 'nothing'}): give --parts with some of those")  # fmt: skip
    _merged_code(extra.get("graded"), graded)
    entries = extra.get("entries", [])
    if not entries or not all("id" in e and all(len(row) == 6 for row in e.get("case_results", ())) for e in entries):
        raise MergeError("the earlier results do not list their cases by id (written by an older grader, or the "
                         "grade failed): grade the whole submission again instead")  # fmt: skip


def read_earlier(path: Path) -> dict:
    """``--merge-into``'s results, or ``MergeError`` saying why they cannot be read."""
    try:
        old = json.loads(path.read_text())
    except OSError as exc:
        raise MergeError(f"--merge-into {path}: cannot read it ({exc.strerror or exc})") from exc
    except ValueError as exc:
        raise MergeError(f"--merge-into {path}: not a results JSON ({exc})") from exc
    if not isinstance(old, dict):
        raise MergeError(f"--merge-into {path}: not a results JSON (a {type(old).__name__})")
    return old


def merge_regrade(old: dict, new: dict, kit: Rubric) -> dict:
    """A regrade of some tests (``--parts``, ``--select``) folded into a student's earlier results, case by case:
    each case the regrade ran (by pytest node id) replaces the earlier one, every other case is kept, and the
    whole is scored again with the kit's rubric, as a full grade would be: entries, numbers, points, maximum, the
    dashboard's data and the output (every part) are those of a full regrade with those outcomes. Refused
    (``MergeError``) when the two were graded with other settings (backend, world sizes, device-faithful mode),
    of other parts than the earlier grade's, from other bytes (``extra_data["graded"]``), or lack their cases.
    The merged results record the code of both (the same bytes: ``_merged_code``) and the time of both."""
    before, after = old.get("extra_data", {}).get("settings"), new.get("extra_data", {}).get("settings")
    problem = _settings_differ(before, after)
    if problem:
        raise MergeError(problem)
    beyond = sorted(set(new.get("extra_data", {}).get("parts", {})) - set(old.get("extra_data", {}).get("parts", {})))
    if beyond:
        raise MergeError(f"the regrade graded {', '.join(beyond)}, which the earlier grade did not")
    graded = _merged_code(old.get("extra_data", {}).get("graded"), new.get("extra_data", {}).get("graded"))
    hidden = _hidden_files(kit)
    earlier, regrade = _record_of(old, "earlier", hidden), _record_of(new, "regrade's", hidden)
    replaced = {item["nodeid"]: item for item in regrade.items}
    items = [replaced.pop(item["nodeid"], item) for item in earlier.items] + list(replaced.values())
    record = RunRecord(
        items=items,
        outcomes={**earlier.outcomes, **regrade.outcomes},
        spent={**earlier.spent, **regrade.spent},
        restarts=earlier.restarts + regrade.restarts,
    )
    notes = new["extra_data"].get("notes", [])
    notes = notes + [n if n.startswith(EARLIER) else EARLIER + n for n in old["extra_data"].get("notes", [])
                     if n.removeprefix(EARLIER) not in notes]  # fmt: skip
    seconds = old.get("execution_time", 0.0) + new.get("execution_time", 0.0)
    merged = build_results(kit, record, notes, seconds, after, graded)
    ids = [e["id"] for e in new["extra_data"]["entries"]]
    kept = len(merged["tests"]) - len(ids)
    merged["output"] = (f"A regrade of {len(ids)} entries ({len(regrade.items)} cases); the other {kept} entries "
                        "are the earlier grade's.\n" + merged["output"])  # fmt: skip
    merged["extra_data"]["regrades"] = old["extra_data"].get("regrades", []) + [ids]
    if "submission" in new["extra_data"] or "submission" in old["extra_data"]:
        merged["extra_data"]["submission"] = old["extra_data"].get("submission", new["extra_data"].get("submission"))
    return merged


def write_json(path: Path, data: dict) -> None:
    """Atomic: a reader never sees half a file, and whatever was at ``path`` before is replaced."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def device_faithful(args) -> bool:
    """Whether the tests run in device-faithful mode (tests/harness/device_faithful.py): ``--device-faithful`` or
    ``--no-device-faithful`` as given, else the suite's default (on with gloo, off with nccl). The grader's own
    environment does not decide it (the tests' environment is built afresh: ``runner._env``)."""
    asked = getattr(args, "device_faithful", None)
    return args.backend == "gloo" if asked is None else asked


def settings_of(args) -> dict:
    """What the results record of how the tests ran (a merge and the GPU bundle's label read it back)."""
    sizes = sorted({int(w) for w in str(args.world_sizes).split(",") if w.strip()})
    return {"backend": args.backend, "world_sizes": ",".join(map(str, sizes)), "device_faithful": device_faithful(args)}


def _settings(args, work: Path, budget: float, hidden: bool, parts: dict | None = None) -> Settings:
    """``parts``: (test file -> part, part -> seconds its tests may take) for the per-part budgets."""
    select = ("-k", args.select) if args.select else ()
    asked = getattr(args, "device_faithful", None)  # passed only when given: asked for, it also stands for a node
    faithful = () if asked is None else ("--device-faithful" if asked else "--no-device-faithful",)
    file_parts, part_budgets = parts or ({}, {})
    return Settings(
        work=work, backend=args.backend, world_sizes=args.world_sizes, deadline=args.deadline,
        test_timeout=args.test_timeout, budget=budget,
        worker_memory_mb=args.memory_mb if args.memory_mb is not None else (0 if args.backend == "nccl" else 4096),
        run_as=args.run_as, python=args.python,
        extra_pytest_args=(*select, *faithful, *(("--grading-redact",) if hidden else ())),
        file_parts=file_parts, part_budgets=part_budgets,
    )  # fmt: skip


def _matching(files: list[str], select: str | None, staff: StaffFiles) -> list[str]:
    """The files with a test function that ``--select`` (a ``-k`` expression) can match by file and function
    name: a selection that matches no hidden test costs no hidden run (parameter ids are not looked at)."""
    if not select:
        return files
    from _pytest.mark.expression import Expression

    expression = Expression.compile(select)
    keep = []

    def matches(key: str) -> bool:
        return expression.evaluate(lambda word, **_: word.lower() in key)

    for f in files:
        names = re.findall(r"^def (test_\w+)", staff.files[f].decode(), re.M)
        if any(matches(f"{f}::{n}".lower()) for n in names):
            keep.append(f)
    return keep


def _run_public_then_hidden(args, rubric: Rubric, staff: StaffFiles, sub, work: Path, start: float,
                            progress=None) -> RunRecord:  # fmt: skip
    """The public tests in a sandbox that holds no hidden test, then the hidden tests in a sandbox,
    pytest process and worker pools of their own, whose failures show no rank output (``--grading-redact``):
    what a submission can read or print while public tests run cannot contain a hidden test."""
    staff_only = [REPO / "reference_solutions", args.rubric, REPO / "tests" / "staff"]
    problem = check_run_as(_settings(args, work, args.timeout, False), tuple(p for p in staff_only if p.exists()))
    if problem:
        raise RuntimeError(problem)  # the staff's setup, not the submission: "the autograder failed", loudly
    files = _test_files(rubric, staff)
    hidden = _matching([f for f in files if rubric.part_of(f)[1] == "hidden"], args.select, staff)
    public = [f for f in files if rubric.part_of(f)[1] == "public"]
    file_parts = {f: rubric.part_of(f)[0].name for f in files}
    budgets = {name: part.budget_s for name, part in rubric.parts.items()}
    settings = _settings(args, work / "public", args.timeout, False, (file_parts, budgets))
    settings.on_progress = progress and functools.partial(progress.update, "public")
    record = run_tests(settings, staff.without(HIDDEN_TESTS), sub, public)
    left = args.timeout - (time.monotonic() - start)
    if not hidden:
        return record
    if left <= 0:
        reason = f"not run: the grader's time budget ({args.timeout:.0f} s) ran out before the hidden tests"
        record.notes.append(reason)
        return record
    # A part's hidden tests get what its public tests left of its budget.
    budgets = {name: budget - record.spent.get(name, 0.0) for name, budget in budgets.items()}
    settings = _settings(args, work / "hidden", left, True, (file_parts, budgets))
    settings.hung_functions = dict(record.hung)  # what hung in the public run is not waited for again
    settings.on_progress = progress and functools.partial(progress.update, "hidden")
    secret = run_tests(settings, staff, sub, hidden)
    if not secret.items and args.select:  # a --select that matches no hidden test: nothing to report
        secret.notes = [n for n in secret.notes if "could not collect" not in n]
    record.items += secret.items
    record.outcomes.update(secret.outcomes)
    record.notes += [n for n in secret.notes if n not in record.notes]
    record.staff_log += "\n[grader] hidden tests, own sandbox and run:\n" + secret.staff_log
    record.restarts += secret.restarts
    for name, seconds in secret.spent.items():
        record.spent[name] = record.spent.get(name, 0.0) + seconds
    return record


def grade_one(args) -> int:
    start = time.monotonic()
    become_subreaper()
    work = Path(tempfile.mkdtemp(prefix="cs336-grade-"))
    record, notes, kit, graded, old, ran, earlier_log = RunRecord(), [], None, None, None, False, None
    try:
        kit = load_rubric(args.rubric)  # the kit's whole rubric: which modules it grades from the submission
        rubric = kit.select(args.parts.split(",") if args.parts else None)
        try:
            raw = read_graded(args.submission)  # through a zip left inside a submission folder too
            sub = keep_graded(raw, graded_modules(list(kit.parts)))
            node = lookup(args.precomputed, sub) if args.precomputed else None
            if node is not None:  # graded on the GPU node (scripts/grading/gpu_results.py): its grade stands
                write_json(args.out, node)
                print(node.get("output", ""))
                return 0
            if args.precomputed and args.precomputed.exists():
                notes.append("this submission was not graded on the staff's GPU node (it changed, or came later): "
                             "this grade is Gradescope's CPU run")  # fmt: skip
            graded = graded_record(kit_submission(sub, list(rubric.parts))[0])  # what the run imports from it
        except SubmissionError as exc:
            notes.append(f"the submission could not be read: {exc}")
            sub = None
        if args.merge_into:  # refused before any test runs: settings, parts and bytes against the earlier grade
            old = read_earlier(args.merge_into)
            check_merge(old, settings_of(args), list(rubric.parts), graded)
            earlier_log = args.merge_into.with_name(args.merge_into.stem + STAFF_LOG)  # read before --staff-log
            earlier_log = earlier_log.read_text(errors="replace") if earlier_log.exists() else None
        ran = True
        if sub is not None:
            notes.extend(sub.notes)
            if not sub.modules and not any(UPLOAD in n for n in notes):
                notes.append(f"no part module (collectives.py, ddp.py, ...) was found in the submission: {UPLOAD}")
            staff = StaffFiles.snapshot(REPO)  # read before any student code runs; not for a precomputed grade
            progress = Progress(rubric)
            try:
                record = _run_public_then_hidden(args, rubric, staff, sub, work, start, progress)
            finally:
                progress.close()
        results = build_results(rubric, record, notes, time.monotonic() - start, settings_of(args), graded)
        results["extra_data"]["submission"] = args.submission.name
        code = 0 if record.items else 2
    except MergeError as exc:
        print(f"not regraded, no test run, nothing written ({args.merge_into} is as it was): {exc}", file=sys.stderr)
        return 2
    except Exception:  # noqa: BLE001 - the grader itself failed: say so visibly, never a silent 0
        results = {"score": 0, "execution_time": round(time.monotonic() - start, 1), "tests": [],
                   "output": "The autograder failed (not your fault); the staff will regrade.\n"
                             + traceback.format_exc()[-3000:]}  # fmt: skip
        code = 2
    finally:
        kill_descendants()
        if args.staff_log and ran:
            Path(args.staff_log).write_text(record.staff_log)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    if args.merge_into:
        try:
            if not results.get("tests"):
                raise MergeError("the regrade graded nothing:\n" + results["output"])
            results = merge_regrade(old, results, kit)
        except MergeError as exc:
            print(f"not merged, nothing written ({args.merge_into} is as it was): {exc}", file=sys.stderr)
            return 2
    write_json(args.out, results)
    print(results["output"])
    if args.merge_into:
        for line in after_merge(earlier_log, args.out, record.staff_log, results):
            print(line)
    return code


def after_merge(earlier_log: str | None, out: Path, staff_log: str, merged: dict) -> list[str]:
    """Every file that describes the merged grade made current, from the merged results: the staff log beside
    ``out`` (``earlier_log``, the one beside the earlier results as it was before this run, then this regrade's,
    when the earlier grade has one: a batch's layout), and, when ``out`` is in a batch's results folder (it holds
    the dashboard), that folder's dashboard and the CSV the batch wrote (``summary.refresh``). Returns what it
    says it did."""
    said = []
    if earlier_log is not None:
        regrades = len(merged["extra_data"].get("regrades", []))
        combined = (earlier_log + f"\n[grader] regrade {regrades} "
                    f"({time.strftime('%F %T')}), merged into the grade above:\n" + staff_log)  # fmt: skip
        log = out.with_name(out.stem + STAFF_LOG)
        write_text_atomic(log, combined)
        said.append(f"staff log: {log} (the earlier grade's, then this regrade's)")
    if (out.parent / SUMMARY_JSON).exists():  # a batch's folder: its dashboard and CSV follow
        said += refresh(out.parent)
    return said


def write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


# -- batch ---------------------------------------------------------------------------------------------


# A batch's own options; every other option of the command line is each grade's, passed on (grade_args).
BATCH_ONLY = ("batch", "csv", "results_dir", "jobs", "out", "staff_log", "merge_into", "precomputed", "submission")


def grade_args(args) -> list[str]:
    """The options a batch passes to each grade: every option of a single grade that was given (the rubric as an
    absolute path: each grade starts in the repository root)."""
    out = ["--backend", args.backend, "--world-sizes", args.world_sizes, "--deadline", str(args.deadline),
           "--timeout", str(args.timeout), "--test-timeout", str(args.test_timeout), "--rubric",
           str(args.rubric.resolve())]  # fmt: skip
    for flag, value in (("--parts", args.parts), ("--select", args.select), ("--run-as", args.run_as),
                        ("--python", args.python), ("--memory-mb", args.memory_mb)):  # fmt: skip
        out += [flag, str(value)] if value is not None else []
    if args.device_faithful is not None:
        out.append("--device-faithful" if args.device_faithful else "--no-device-faithful")
    if args.keep:
        out.append("--keep")
    return out


def _batch(args) -> int:
    from tqdm import tqdm

    # Absolute paths: each submission is graded by `python -m scripts.grading` started in the repository root.
    subs = sorted(p.resolve() for p in args.batch.iterdir() if p.is_dir() or p.suffix == ".zip")
    out_dir = (args.results_dir or args.batch.with_name(args.batch.name + "-results")).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    passthrough = grade_args(args)
    if args.run_as:  # a submission must not read the others, nor their results
        out_dir.mkdir(parents=True, exist_ok=True)
        out_dir.chmod(0o700)
        settings = Settings(work=out_dir, run_as=args.run_as, python=args.python)
        problem = check_run_as(settings, (args.batch.resolve(), *subs, out_dir))
        if problem:
            print(f"not grading: {problem}", file=sys.stderr)
            return 2

    def one(sub: Path):
        out = out_dir / f"{sub.stem}.json"
        log = ["--staff-log", str(out_dir / f"{sub.stem}{STAFF_LOG}")]  # the dashboard reads hidden failures there
        cmd = [sys.executable, "-m", "scripts.grading", str(sub), "--out", str(out), *passthrough, *log]
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=args.timeout + 300)
        return sub, out, proc.returncode

    rows, results = [], {}
    with ThreadPoolExecutor(max_workers=args.jobs) as pool, tqdm(total=len(subs), unit="submission") as bar:
        for fut in as_completed([pool.submit(one, s) for s in subs]):
            sub, out, code = fut.result()
            try:
                res = json.loads(out.read_text())
            except (OSError, ValueError):
                res = {"score": 0, "tests": []}
            results[sub.name] = res
            rows.append(grade_row(sub.name, res, "ok" if code == 0 else f"grader exit {code}"))
            bar.set_postfix_str(f"{sub.name}: {res.get('score', 0)}")
            bar.update()
    rows.sort(key=lambda r: r["submission"])
    columns = list(dict.fromkeys(k for r in rows for k in r))
    print("| " + " | ".join(columns) + " |\n|" + "---|" * len(columns))
    for r in rows:
        print("| " + " | ".join(str(r.get(c, "")) for c in columns) + " |")
    # A folder graded into before (late submissions into node-results/): its other results stay in the CSV and
    # the dashboard, which describe the whole folder.
    mine, earlier = {Path(n).stem for n in results}, []
    for stem, res in read_results(out_dir).items():
        if stem not in mine:
            name = (res.get("extra_data") or {}).get("submission", stem)
            results[name] = res
            earlier.append(grade_row(name, res))
    if earlier:
        print(f"({len(earlier)} earlier results in {out_dir} are kept in the CSV and the dashboard)")
    if args.csv:
        write_grades_csv(sorted(rows + earlier, key=lambda r: r["submission"]), args.csv)
    write_summary(results, out_dir, csv_path=args.csv)  # the staff dashboard; it records the CSV for a refresh
    print(
        f"dashboard: {out_dir / 'summary.md'} (pass rates, commonest failures), {out_dir / 'dashboard.png'} "
        f"(failing, unfinished and passing students per task) and {out_dir / 'grades.png'} (the grades)"
    )
    return 0 if all(r["status"] == "ok" for r in rows) else 1


def _end_on_signals() -> None:
    """SIGTERM, SIGINT and SIGHUP unwind this process, so the cleanup in ``finally`` ends every process it
    started (pytest's process group, rank workers, anything a submission forked: this is a subreaper).
    The parent's death sends SIGTERM here (Linux), so a killed batch or shell takes its grades down too."""

    def stop(signum, _frame):
        signal.signal(signum, signal.SIG_IGN)  # a second signal must not interrupt the cleanup itself
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stop)
    die_with_parent(signal.SIGTERM)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("submission", nargs="?", type=Path, help="a zip, or a folder holding cs336_systems/")
    p.add_argument("--out", type=Path, default=Path("results.json"), help="results file (default results.json)")
    p.add_argument("--batch", type=Path, help="grade every zip and folder in this folder instead")
    p.add_argument("--csv", type=Path, help="--batch: write one row per submission here")
    p.add_argument("--results-dir", type=Path, help="--batch: where each results JSON goes (default DIR-results)")
    p.add_argument("--jobs", type=int, default=1, help="--batch: submissions graded at once (default 1)")
    p.add_argument("--parts", help="comma-separated part names or numbers (default: all in the rubric)")
    p.add_argument("--select", help="only tests matching this pytest -k expression (regrading one test)")
    p.add_argument("--backend", default=defaults.DEFAULT_BACKEND, choices=["gloo", "nccl"],
                   help=f"gloo (CPU) or nccl (GPUs) (default {defaults.DEFAULT_BACKEND})")  # fmt: skip
    p.add_argument("--world-sizes", default=defaults.DEFAULT_WORLD_SIZES,
                   help=f"world sizes for distributed tests (default {defaults.DEFAULT_WORLD_SIZES})")  # fmt: skip
    p.add_argument("--deadline", type=float, default=defaults.DEFAULT_DEADLINE_S,
                   help=f"seconds a distributed run may take (default {defaults.DEFAULT_DEADLINE_S:g})")  # fmt: skip
    p.add_argument("--test-timeout", type=float, default=240, help="seconds one test may take in all (default 240)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                   help=f"seconds for the whole grade (default {DEFAULT_TIMEOUT_S:g})")  # fmt: skip
    p.add_argument("--memory-mb", type=int, help="address-space cap per rank (default 4096 on gloo, none on nccl)")
    p.add_argument("--run-as", help="run the tests as this unprivileged user (when the grader runs as root)")
    p.add_argument("--python", help="interpreter for the tests (default: this one); with --run-as, one that user "
                   "can run, outside an unreadable home (handouts/grading.md)")  # fmt: skip
    p.add_argument("--rubric", type=Path, default=RUBRIC_PATH, help="rubric file (default scripts/grading/rubric.toml)")
    p.add_argument("--staff-log", type=Path, help="write pytest's own output and runner events here (for graders)")
    p.add_argument("--merge-into", type=Path, help="a regrade (--parts/--select) replaces exactly the cases it ran "
                   "(by node id) in this earlier results JSON, keeps the rest and scores the whole again (write the "
                   "merged file with --out; same --backend and --world-sizes as the earlier grade)")  # fmt: skip
    p.add_argument(
        "--precomputed",
        type=Path,
        help="a GPU node's results bundle (scripts/grading/gpu_results.py): "
        "a submission found in it gets those results, nothing runs",
    )
    p.add_argument("--device-faithful", action=argparse.BooleanOptionalAction, default=None,
                   help="device-faithful mode of the tests (tests/README.md): on gloo, fail what NCCL would (a CPU "
                   "tensor meeting the rank's); default: on with gloo, off with nccl. --no-device-faithful grades "
                   "as plain gloo does; recorded in results.json (extra_data.settings)")  # fmt: skip
    p.add_argument("--keep", action="store_true", help="keep the sandbox folder (for debugging the grader)")
    return p


def main(argv=None) -> int:
    _end_on_signals()
    p = build_parser()
    args = p.parse_args(argv)
    if args.batch:
        return _batch(args)
    if args.submission is None:
        p.error("give a SUBMISSION or --batch DIR")
    return grade_one(args)


if __name__ == "__main__":
    sys.exit(main())
