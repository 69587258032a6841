"""The staff dashboard after a batch: where the class's bugs are, from the results JSON of every submission.

    python -m scripts.grading --batch submissions/ --csv grades.csv     # writes it beside the results:
        submissions-results/summary.md     the class's failures by task and by (test, case), in students
        submissions-results/summary.json   the same numbers, for a spreadsheet or a script
        submissions-results/dashboard.png  students failing / unfinished / passing, per task (parts in the title)
        submissions-results/grades.png     the grade histogram (percent of the autograded maximum)
    python -m scripts.grading.summary submissions-results/              # again, from the results alone, and the
                                                                        # batch's CSV (after a regrade's merge)

Each results JSON carries, in ``extra_data["entries"]``, every test function's cases: the case id, the task(s)
its markers name, its outcome and a one-line headline of its failure (scripts/grading/__main__.py
``build_results``). What the dashboard does with them:

- **counts in students**, not test cases: a student fails a (test, case) when any of its world sizes fails;
- **unfinished work apart**: a case whose failures are all ``NotImplementedError`` (a stub left as given) counts
  as *unfinished*, never as a failure, so a class that has not started a task does not drown real bugs;
- **one task per case**: a case is attributed to the task its markers name (a parametrized test checks several
  tasks, one per case: ``bucketed`` cases are task 2.4's); a case marked with several says so (``2.3+2.4``);
- **grouped by test and by parametrized case**, world sizes merged (``w2-bucketed-deep`` and
  ``w4-bucketed-deep`` are one case); each task row names the case words every failing case shares
  (``bucketed``), which is usually the bug;
- **hidden tests' real assertion, for staff**: students see a redacted failure; the batch keeps each grade's
  staff log (``<submission>.staff.log``: pytest's own output) and the dashboard shows the real headline;
- **the parts covered named** on every figure and at the top of summary.md.

Failure headlines are compared with their numbers blanked out (``rank 3 step 2`` and ``rank 1 step 0`` are the
same failure).
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

SUMMARY_MD, SUMMARY_JSON, HISTOGRAM, DASHBOARD = "summary.md", "summary.json", "grades.png", "dashboard.png"
STAFF_LOG = ".staff.log"  # <submission>.staff.log beside <submission>.json: pytest's own output, staff only

_RAISED = re.compile(r"(?:^|: )((?:\w+\.)*\w*(?:Error|Exception|Failure|Timeout)\b.*)")
_UNFINISHED = re.compile(r"\bNotImplementedError\b")
_WORLD = re.compile(r"^w\d+$")
_SECTION = re.compile(r"^_{2,} (test\S*?) _{2,}$", re.M)  # pytest's "____ test_f[case] ____" failure header


def headline(text: str, limit: int = 160) -> str:
    """The line of a failure that says what went wrong: pytest's last ``E`` line naming an exception or an
    ``assert`` (a rank's ``--- rank 1: error:`` prefix dropped), else its first ``E`` line, else its first line."""
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    errors = [ln[1:].strip() for ln in lines if ln.startswith("E ")]
    pick = None
    for ln in reversed(errors):
        if ln.startswith("assert "):
            pick = ln
            break
        m = _RAISED.search(ln)
        if m and not ln.startswith(("File ", "Traceback")):
            pick = m.group(1)
            break
    pick = pick or (errors[0] if errors else lines[0] if lines else "(no message)")
    return pick if len(pick) <= limit else pick[: limit - 3] + "..."


def _shape(message: str) -> str:
    return re.sub(r"\d+(\.\d+)?(e-?\d+)?", "#", message)


def case_key(case_id: str) -> str:
    """A parametrized case without its world size: ``w4-bucketed-deep`` -> ``bucketed-deep`` ("" -> "-")."""
    return "-".join(p for p in case_id.split("-") if not _WORLD.match(p)) or "-"


def task_label(tasks, part) -> str:
    """One task (``2.4``), a case spanning several (``2.3+2.4``), or none (``part 2 (no task)``)."""
    tasks = sorted(tasks, key=lambda t: tuple(int(x) for x in t.split(".")))
    return "+".join(tasks) if tasks else f"part {part} (no task)"


def _order(task: str) -> tuple:
    """``2.4`` -> (2, 4); a spanning or task-less label sorts after its part's single tasks."""
    nums = re.findall(r"\d+", task)
    return tuple(int(n) for n in nums[:2]) if "+" not in task and "(" not in task else (int(nums[0]), 99)


def staff_headlines(log: str) -> dict[str, str]:
    """{``test_f[case]``: the real failure's headline} from a grade's staff log (pytest's -q --tb=short output),
    where the hidden tests' failures appear unredacted."""
    found, heads = {}, list(_SECTION.finditer(log or ""))
    for i, m in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(log)
        body = log[m.end() : end].split("\n=====", 1)[0]
        found[m.group(1).strip()] = headline(body)
    return found


def _cases(entry: dict) -> list[list]:
    """[case id, tasks, outcome, headline] per counted case (skipped ones count neither way); results written
    before case rows existed give one row per failure headline (case "?") and the entry's tasks."""
    if "case_results" in entry:
        return [row[:4] for row in entry["case_results"] if row[2] != "skipped"]
    rows = [["?", entry.get("tasks", []), "failed", h] for h in entry.get("failures", [])]
    return rows + [["?", entry.get("tasks", []), "passed", ""]] * max(0, entry.get("passed", 0))


def summarize(results: dict[str, dict], staff_logs: dict[str, str] | None = None) -> dict:
    """{submission: results JSON} (and {submission: staff log}) -> the dashboard's numbers (summary.json)."""
    staff_logs = staff_logs or {}
    # (entry id, pool, case) -> per-student status and failure headlines. The id, not the function's name: 15
    # parts have a test_bad_input_raises_on_every_rank_before_communicating of their own.
    cases: dict[tuple, dict] = {}
    grades, parts = [], set()
    for sub, res in sorted(results.items()):
        most = sum(t.get("max_score", 0) for t in res.get("tests", []))
        grades.append({"submission": sub, "score": res.get("score", 0), "max_score": round(most, 3),
                       "percent": round(100 * res.get("score", 0) / most, 1) if most else 0.0,
                       "fingerprint": fingerprint_of_results(res)})  # fmt: skip
        real = staff_headlines(staff_logs.get(sub, ""))
        mine: dict[tuple, list] = defaultdict(list)
        for e in res.get("extra_data", {}).get("entries", []):
            parts.add(e.get("part"))
            for case_id, tasks, outcome, head in _cases(e):
                key = (e.get("id", e["name"]), e.get("pool", "public"), case_key(case_id))
                row = cases.setdefault(key, {"name": e["name"], "part": e.get("part"), "tasks": set(), "failed": set(),
                                             "unfinished": set(), "passed": set(), "failures": Counter(),
                                             "example": {}, "staff": Counter(), "staff_example": {}})  # fmt: skip
                row["tasks"] |= set(tasks)
                if outcome == "passed":
                    mine[key].append(None)
                    continue
                nodeid = f"{e['name']}[{case_id}]" if case_id else e["name"]
                staff = real.get(nodeid) if e.get("pool") == "hidden" else None
                mine[key].append(staff or head)
                row["failures"][_shape(head)] += 1
                row["example"].setdefault(_shape(head), head)
                if staff:
                    row["staff"][_shape(staff)] += 1
                    row["staff_example"].setdefault(_shape(staff), staff)
        for key, heads in mine.items():
            failed = [h for h in heads if h is not None]
            unfinished = failed and all(_UNFINISHED.search(h) for h in failed)
            status = "passed" if not failed else "unfinished" if unfinished else "failed"
            cases[key][status].add(sub)

    def commonest(counter: Counter, examples: dict) -> tuple[str, int]:
        real = [(k, n) for k, n in counter.most_common() if not _UNFINISHED.search(k)] or counter.most_common()
        return (examples[real[0][0]], real[0][1]) if real else ("", 0)

    out_cases, raw = [], {}
    for (entry, pool, case), r in cases.items():
        test = r["name"]
        raw[(entry, case)] = r
        fail, n = commonest(r["failures"], r["example"])
        staff, _ = commonest(r["staff"], r["staff_example"])
        out_cases.append({
            "task": task_label(r["tasks"], r["part"]), "spans_tasks": len(r["tasks"]) > 1, "part": r["part"],
            "test": test + (" (hidden)" if pool == "hidden" else ""), "id": entry, "case": case,
            "students_failing": len(r["failed"]), "students_unfinished": len(r["unfinished"]),
            "students_passing": len(r["passed"]), "commonest_failure": fail, "commonest_failure_count": n,
            "staff_failure": staff, "failing": sorted(r["failed"]),
        })  # fmt: skip
    out_cases.sort(key=lambda c: (-c["students_failing"], c["task"], c["test"], c["case"]))

    # Tasks: a student fails a task when any case attributed to it fails; unfinished when its cases only raise
    # NotImplementedError; passes when every case passes.
    by_task: dict[str, dict] = {}
    for c in out_cases:
        t = by_task.setdefault(c["task"], {"part": c["part"], "failed": set(), "unfinished": set(),
                                           "students": set(), "cases": [], "tests": Counter(),
                                           "failure": Counter(), "example": {}})  # fmt: skip
        r = raw[(c["id"], c["case"])]
        t["failed"] |= r["failed"]
        t["unfinished"] |= r["unfinished"]
        t["students"] |= r["failed"] | r["unfinished"] | r["passed"]
        if c["students_failing"]:
            t["cases"].append(c["case"])
            t["tests"][c["test"]] += c["students_failing"]
            shown = c["staff_failure"] or c["commonest_failure"]
            t["failure"][_shape(shown)] += c["students_failing"]
            t["example"].setdefault(_shape(shown), shown)
    out_tasks = []
    for label, t in by_task.items():
        unfinished = t["unfinished"] - t["failed"]
        words = [set(c.split("-")) for c in t["cases"]]
        shared = sorted(set.intersection(*words) - {"-", "?"}) if words else []
        worst = max(sorted(set(t["cases"])), key=t["cases"].count) if t["cases"] else ""  # ties: first by name
        fail, _ = commonest(t["failure"], t["example"])
        out_tasks.append({
            "task": label, "part": t["part"], "students_failing": len(t["failed"]),
            "students_unfinished": len(unfinished), "students_passing": len(t["students"] - t["failed"] - unfinished),
            "cases_failing": len(t["cases"]), "case_words": shared, "commonest_case": worst,
            "tests_failing": [name for name, _ in t["tests"].most_common()], "commonest_failure": fail,
        })  # fmt: skip
    # A bug in an early task fails the later tasks of its part that build on it, for the same students: those
    # rows say so and come after the rows that are not explained by an earlier one.
    failing = {t["task"]: (t["part"], by_task[t["task"]]["failed"]) for t in out_tasks}
    for t in out_tasks:
        t["follows"] = next((u for u, (part, who) in sorted(failing.items(), key=lambda kv: _order(kv[0]))
                             if part == t["part"] and who and who == failing[t["task"]][1]
                             and _order(u) < _order(t["task"])), "")  # fmt: skip
    out_tasks.sort(key=lambda t: (-t["students_failing"], bool(t["follows"]), -t["cases_failing"], t["task"]))
    return {"submissions": len(results), "parts": sorted(p for p in parts if p is not None), "grades": grades,
            "tasks": out_tasks, "cases": out_cases}  # fmt: skip


def parts_title(s: dict) -> str:
    parts = s.get("parts") or []
    return ("part " if len(parts) == 1 else "parts ") + ", ".join(map(str, parts)) if parts else "no part"


def _case(case: str) -> str:
    return "(not parametrized)" if case == "-" else case


def _cell(text: str) -> str:
    return f"`{text.replace('|', '/')}`" if text else ""


def render_markdown(s: dict) -> str:
    pct = [g["percent"] for g in s["grades"]]
    out = [f"# Batch summary: {s['submissions']} submissions, {parts_title(s)}", ""]
    if pct:
        mid = sorted(pct)[len(pct) // 2]
        out += [f"Autograded grade (percent of the maximum over {parts_title(s)}): median {mid:g}, min {min(pct):g}, "
                f"max {max(pct):g}. Figures: [{DASHBOARD}]({DASHBOARD}), [{HISTOGRAM}]({HISTOGRAM}).", ""]  # fmt: skip
    out += ["Counts are students. *Failing*: some case fails with a real error; *unfinished*: its cases only raise "
            "NotImplementedError (a stub), counted apart. A case belongs to the task its markers name (`a+b`: a case "
            "that checks several). Hidden tests' failures show the real assertion (staff only; students see it "
            "redacted).", "",
            "## Where the class fails, by task", "",
            "| task | failing | unfinished | passing | failing cases share | commonest case | tests "
            "| commonest failure |",
            "|---|---:|---:|---:|---|---|---|---|"]  # fmt: skip
    for t in s["tasks"]:
        tests = ", ".join(t["tests_failing"][:3]) + (" ..." if len(t["tests_failing"]) > 3 else "")
        label = t["task"] + (f" (same students as {t['follows']}: likely its consequence)" if t["follows"] else "")
        out.append(f"| {label} | {t['students_failing']} | {t['students_unfinished']} | {t['students_passing']} "
                   f"| {' '.join(t['case_words'])} | {_case(t['commonest_case'])} | {tests} "
                   f"| {_cell(t['commonest_failure'])} |")  # fmt: skip
    out += ["", "## Failures by test and parametrized case (world sizes merged)", "",
            "| task | test | case | failing | unfinished | passing | commonest failure (how many) "
            "| real (hidden, staff) |",
            "|---|---|---|---:|---:|---:|---|---|"]  # fmt: skip
    for c in s["cases"]:
        if not (c["students_failing"] or c["students_unfinished"]):
            continue
        fail = f"{_cell(c['commonest_failure'])} ({c['commonest_failure_count']})" if c["commonest_failure"] else ""
        out.append(f"| {c['task']} | {c['test']} | {_case(c['case'])} | {c['students_failing']} "
                   f"| {c['students_unfinished']} | {c['students_passing']} | {fail} "
                   f"| {_cell(c['staff_failure'])} |")  # fmt: skip
    out += ["", "## The code each grade graded", "",
            "Each grade's fingerprint (the first 16 of its 64 hex digits; the CSV and summary.json have them whole): "
            "SHA-256 over the modules it took from the submission (scripts/grading/fingerprint.py). A regrade is "
            "merged, and a grade is delivered to Gradescope, only for these bytes.", "",
            "| submission | score | fingerprint |", "|---|---:|---|"]  # fmt: skip
    for g in s["grades"]:
        out.append(f"| {g['submission']} | {g['score']:g} / {g['max_score']:g} | "
                   f"{_cell(g.get('fingerprint', '')[:16]) or '(none: not read)'} |")  # fmt: skip
    return "\n".join(out) + "\n"


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def draw_histogram(s: dict, path: Path) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.hist([g["percent"] for g in s["grades"]], bins=list(range(0, 101, 10)), color="#4C72B0", edgecolor="white")
    ax.set_xlabel(f"autograded score (% of the maximum over {parts_title(s)})")
    ax.set_ylabel("submissions")
    ax.set_title(f"{s['submissions']} submissions, {parts_title(s)}")
    ax.set_xlim(0, 100)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def draw_dashboard(s: dict, path: Path, rows: int = 20) -> None:
    """Per task (most failing first): students failing, unfinished and passing, each bar labelled with the case
    words its failures share and the commonest failing test."""
    plt = _plt()
    tasks = s["tasks"][:rows][::-1]
    fig, ax = plt.subplots(figsize=(11, 0.45 * len(tasks) + 1.6))
    y = range(len(tasks))
    fail = [t["students_failing"] for t in tasks]
    unf = [t["students_unfinished"] for t in tasks]
    ok = [t["students_passing"] for t in tasks]
    ax.barh(y, fail, color="#C44E52", label="failing (a real error)")
    ax.barh(y, unf, left=fail, color="#BBBBBB", label="unfinished (NotImplementedError)")
    ax.barh(y, ok, left=[a + b for a, b in zip(fail, unf)], color="#55A868", label="passing")
    ax.set_yticks(list(y), [f"task {t['task']}" + (f" (after {t['follows']})" if t.get("follows") else "")
                            for t in tasks])  # fmt: skip
    for i, t in enumerate(tasks):
        if t["students_failing"]:
            where = " ".join(t["case_words"]) or _case(t["commonest_case"])
            test = t["tests_failing"][0] if t["tests_failing"] else ""
            ax.text(0.02, i, f"  {where}  ·  {test}", va="center", fontsize=7, color="white",
                    transform=ax.get_yaxis_transform())  # fmt: skip
    ax.set_xlabel("students")
    ax.set_title(f"Where the class fails: {s['submissions']} submissions, {parts_title(s)}")
    ax.legend(loc="lower right", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def fingerprint_of_results(results: dict) -> str:
    """The fingerprint of the code a results JSON graded (``extra_data["graded"]``), "" when it records none."""
    return ((results.get("extra_data") or {}).get("graded") or {}).get("fingerprint", "")


def grade_row(name: str, results: dict, status: str | None = None) -> dict:
    """A submission's CSV row, from its results alone: score, maximum, one column per part, the grade's seconds
    (its ``execution_time``: a merged grade's is both runs'), a status (``ok``, or the grader's failure: ``status``
    where the caller knows the exit code) and the fingerprint of the code graded. The batch, a merge's refresh and
    the cluster's ``collect`` write the same rows."""
    parts = (results.get("extra_data") or {}).get("parts", {})
    ok = bool(results.get("tests"))
    return {"submission": name, "score": results.get("score", 0),
            "max_score": round(sum(t.get("max_score", 0) for t in results.get("tests", [])), 2),
            **{p: v[0] for p, v in parts.items()}, "seconds": round(results.get("execution_time", 0)),
            "status": "ok" if ok and status in (None, "ok") else (status or "grader exit 2"),
            "fingerprint": fingerprint_of_results(results)}  # fmt: skip


def write_grades_csv(rows: list[dict], path: Path) -> list[str]:
    """One row per submission into ``path`` (the batch's CSV; the cluster's ``collect`` writes the same), columns in
    the order the rows first name them; returns the columns."""
    columns = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, columns, restval="")
        writer.writeheader()
        writer.writerows(rows)
    return columns


def write_summary(results: dict[str, dict], out_dir: Path, staff_logs: dict[str, str] | None = None,
                  csv_path: Path | None = None) -> dict:  # fmt: skip
    """Write summary.md, summary.json, dashboard.png and grades.png into ``out_dir``; return the numbers.
    ``csv_path``: the CSV written beside them, recorded in summary.json so that ``refresh`` rewrites it too."""
    s = summarize(results, staff_logs if staff_logs is not None else read_staff_logs(out_dir, results))
    if csv_path is not None:
        s["csv"] = str(Path(csv_path).resolve())
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / SUMMARY_JSON).write_text(json.dumps(s, indent=1) + "\n")
    (out_dir / SUMMARY_MD).write_text(render_markdown(s))
    draw_histogram(s, out_dir / HISTOGRAM)
    draw_dashboard(s, out_dir / DASHBOARD)
    return s


def read_staff_logs(folder: Path, results: dict[str, dict]) -> dict[str, str]:
    """{submission: its staff log} for the submissions of ``results`` that have one in ``folder``."""
    logs = {}
    for sub in results:
        path = folder / f"{Path(sub).stem}{STAFF_LOG}"
        if path.exists():
            logs[sub] = path.read_text(errors="replace")
    return logs


def refresh(folder: Path, csv_path: Path | None = None) -> list[str]:
    """Rebuild, from the results JSONs in ``folder`` alone, its dashboard and its CSV (``csv_path``, else the one
    its summary.json records: the batch's ``--csv``, the cluster's ``grades.csv``): what a merge does to the folder
    it writes into, and ``python -m scripts.grading.summary FOLDER``. Returns what it wrote."""
    if csv_path is None:
        try:
            recorded = json.loads((folder / SUMMARY_JSON).read_text()).get("csv")
        except (OSError, ValueError):
            recorded = None
        csv_path = Path(recorded) if recorded else None
    results = read_results(folder)
    said = []
    if csv_path is not None:
        rows = [grade_row((res.get("extra_data") or {}).get("submission", stem), res) for stem, res in results.items()]
        write_grades_csv(sorted(rows, key=lambda r: r["submission"]), csv_path)
        said.append(f"CSV: {csv_path} ({len(rows)} rows)")
    s = write_summary(results, folder, csv_path=csv_path)
    said.append(f"dashboard of {folder} rewritten ({s['submissions']} submissions, {parts_title(s)})")
    return said


def read_results(folder: Path) -> dict[str, dict]:
    found = {}
    for path in sorted(folder.glob("*.json")):
        if path.name == SUMMARY_JSON:
            continue
        try:
            found[path.stem] = json.loads(path.read_text())
        except ValueError:
            continue
    return found


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", type=Path, help="a batch's results folder (one results JSON per submission)")
    ap.add_argument("--csv", type=Path, help="also write the CSV here (default: the one the batch or the cluster's "
                    "collect wrote, as summary.json records it)")  # fmt: skip
    args = ap.parse_args(argv)
    if not args.results.is_dir():
        ap.error(f"results: {args.results} is not a folder")
    for line in refresh(args.results, args.csv):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
