"""The staff dashboard after a batch: where the class struggles, from the results JSON of every submission.

    python -m scripts.grading --batch submissions/ --csv grades.csv     # writes it beside the results:
        submissions-results/summary.md     pass rate per task and per test, each test's commonest failure
        submissions-results/summary.json   the same numbers, for a spreadsheet or a script
        submissions-results/grades.png     the grade histogram (percent of the autograded maximum)
    python -m scripts.grading.summary submissions-results/              # again, from the results alone

Each results JSON carries, in ``extra_data["entries"]``, every test function's task(s), cases passed and
counted, and a one-line headline of each failing case (scripts/grading/__main__.py ``build_results``).
A task's pass rate is its cases passed over its cases counted, over all submissions; a test's is the share
of submissions that passed all its cases. Failure headlines are compared with their numbers blanked out
(``rank 3 step 2`` and ``rank 1 step 0`` are the same failure).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

SUMMARY_MD, SUMMARY_JSON, HISTOGRAM = "summary.md", "summary.json", "grades.png"


_RAISED = re.compile(r"(?:^|: )((?:\w+\.)*\w*(?:Error|Exception|Failure|Timeout)\b.*)")


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


def summarize(results: dict[str, dict]) -> dict:
    """{submission: results JSON} -> the dashboard's numbers (what summary.json holds)."""
    tasks: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # task -> [cases passed, cases counted]
    tests: dict[str, dict] = {}
    grades = []
    for sub, res in sorted(results.items()):
        most = sum(t.get("max_score", 0) for t in res.get("tests", []))
        grades.append({"submission": sub, "score": res.get("score", 0), "max_score": round(most, 3),
                       "percent": round(100 * res.get("score", 0) / most, 1) if most else 0.0})  # fmt: skip
        for e in res.get("extra_data", {}).get("entries", []):
            key = f"{e['name']}" + (" (hidden)" if e.get("pool") == "hidden" else "")
            row = tests.setdefault(key, {"part": e.get("part"), "tasks": e.get("tasks", []), "submissions": 0,
                                         "all_passed": 0, "cases_passed": 0, "cases": 0, "failures": Counter(),
                                         "example": {}})  # fmt: skip
            row["submissions"] += 1
            row["all_passed"] += e["cases"] > 0 and e["passed"] == e["cases"]
            row["cases_passed"] += e["passed"]
            row["cases"] += e["cases"]
            for msg in e.get("failures", []):
                row["failures"][_shape(msg)] += 1
                row["example"].setdefault(_shape(msg), msg)
            for t in e.get("tasks", []):
                tasks[t][0] += e["passed"]
                tasks[t][1] += e["cases"]
    out_tests = []
    for name, r in tests.items():
        common = r["failures"].most_common(1)
        out_tests.append({
            "test": name, "part": r["part"], "tasks": r["tasks"], "submissions": r["submissions"],
            "pass_rate": round(r["all_passed"] / r["submissions"], 3) if r["submissions"] else 0.0,
            "case_pass_rate": round(r["cases_passed"] / r["cases"], 3) if r["cases"] else 0.0,
            "commonest_failure": r["example"][common[0][0]] if common else "",
            "commonest_failure_count": common[0][1] if common else 0,
        })  # fmt: skip
    out_tests.sort(key=lambda t: (t["pass_rate"], t["test"]))
    order = sorted(tasks, key=lambda t: tuple(int(x) for x in t.split(".")))
    out_tasks = [{"task": t, "case_pass_rate": round(tasks[t][0] / tasks[t][1], 3) if tasks[t][1] else 0.0,
                  "cases": tasks[t][1]} for t in order]  # fmt: skip
    return {"submissions": len(results), "grades": grades, "tasks": out_tasks, "tests": out_tests}


def render_markdown(s: dict) -> str:
    pct = [g["percent"] for g in s["grades"]]
    out = [f"# Batch summary: {s['submissions']} submissions", ""]
    if pct:
        mid = sorted(pct)[len(pct) // 2]
        out += [f"Autograded grade (percent of the maximum): median {mid:g}, min {min(pct):g}, max {max(pct):g}. "
                f"Histogram: [{HISTOGRAM}]({HISTOGRAM}).", ""]  # fmt: skip
    out += ["## Tasks (hardest first)", "", "| task | cases passed | cases |", "|---|---|---|"]
    out += [f"| {t['task']} | {t['case_pass_rate']:.0%} | {t['cases']} |"
            for t in sorted(s["tasks"], key=lambda t: t["case_pass_rate"])]  # fmt: skip
    out += ["", "## Tests (hardest first)", "",
            "| test | part | tasks | submissions passing | cases passed | commonest failure (how many) |",
            "|---|---|---|---|---|---|"]  # fmt: skip
    for t in s["tests"]:
        fail = t["commonest_failure"].replace("|", "\\|")
        fail = f"`{fail}` ({t['commonest_failure_count']})" if fail else ""
        out.append(f"| {t['test']} | {t['part']} | {', '.join(t['tasks'])} | {t['pass_rate']:.0%} | "
                   f"{t['case_pass_rate']:.0%} | {fail} |")  # fmt: skip
    return "\n".join(out) + "\n"


def draw_histogram(s: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.hist([g["percent"] for g in s["grades"]], bins=list(range(0, 101, 10)), color="#4C72B0", edgecolor="white")
    ax.set_xlabel("autograded score (% of the maximum)")
    ax.set_ylabel("submissions")
    ax.set_title(f"{s['submissions']} submissions")
    ax.set_xlim(0, 100)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_summary(results: dict[str, dict], out_dir: Path) -> dict:
    """Write summary.md, summary.json and grades.png into ``out_dir``; return the numbers."""
    s = summarize(results)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / SUMMARY_JSON).write_text(json.dumps(s, indent=1) + "\n")
    (out_dir / SUMMARY_MD).write_text(render_markdown(s))
    draw_histogram(s, out_dir / HISTOGRAM)
    return s


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
    args = ap.parse_args(argv)
    s = write_summary(read_results(args.results), args.results)
    print(f"wrote {args.results / SUMMARY_MD} ({s['submissions']} submissions)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
