"""Points from one source: the rubric (scripts/grading/rubric.toml). Prints them, writes them into the
handouts, and checks that everything agrees.

    python -m scripts.grading.points            # the tables: per entry, per task, written problems
    python -m scripts.grading.points --write    # rewrite each handout's points block and section headings
    python -m scripts.grading.points --check    # CI: fail on any disagreement (exit status 1)

The rubric gives each part's public points per handout task (``[parts.X.tasks]``: "1.5" = 5); a
task's points spread over the test functions marked ``task1_5`` (rubric.py scores them so). Hidden
points are per part. Written problems (``[[written]]``) are graded by hand, outside the autograder.

A handout carries, between ``<!-- points:begin -->`` and ``<!-- points:end -->``, its part's table:
every task with its points, the hidden tests, the autograded total and the written problems. The
number in each task's or written problem's section heading (``## 1.5 ring all_reduce (5 pts)``)
comes from the rubric too. ``--write`` rewrites both; ``--check`` fails when either is stale, and on:
points that are not whole; tasks that do not add up to the part's points; a task with no test; a
test (public or hidden) whose cases carry no task marker of its part; a marker naming a task the
rubric does not list; the rubric's tasks differing from tests/conftest.py's TASKS; a hidden pool with
points but no test file; a test file in no entry; a written problem whose heading is not found; time budgets
that sum to the grader's default --timeout or more.

The guide's and the README's numbers (``<!--=name-->N<!--/-->``: parts, points, the entries of a full grade, the
budgets' sum) and tables are generated here too, by ``--write``, and checked by ``--check``.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import io
import re
import sys
from pathlib import Path

from scripts.grading.rubric import DEFAULT_TIMEOUT_S, Rubric, excluded, load_rubric, tasks_of

ROOT = Path(__file__).resolve().parents[2]
BEGIN, END = "<!-- points:begin -->", "<!-- points:end -->"
# The harness's and the shared oracles' own tests (marker `harness`): they never run an implementation.
UNGRADED = {
    "tests/test_harness.py",
    "tests/test_trace.py",
    "tests/test_oracles.py",
    "tests/test_harness_p2p_matching.py",
    "tests/test_harness_children.py",
    "tests/test_harness_zygote.py",
    "tests/test_harness_platform.py",
    "tests/test_harness_device_faithful.py",
}
HEADING = re.compile(
    r"^## (?P<title>.+?)(?P<points>\s*(?:\((?:[^()]*?, )?[\d.]+ (?:pts?|points?)\)|— [\d.]+ points?))?\s*$"
)


def files_of(patterns) -> list[str]:
    return sorted({p for pat in patterns for p in glob.glob(pat, root_dir=ROOT)})


def _fmt(x: float) -> str:
    return f"{x:g}"


def _pts(x: float) -> str:
    return f"{_fmt(x)} pt" if x == 1 else f"{_fmt(x)} pts"


# -- the tests' task markers -----------------------------------------------------------------------------


def collect_items() -> list[dict]:
    """What the grader collects (public and hidden tests, default world sizes), as the grading plugin
    describes items: nodeid, file, function, markers."""
    import pytest

    from scripts.grading.plugin import _item_info

    class Collector:
        items: list[dict] = []

        def pytest_collection_modifyitems(self, session, config, items):
            for item in items:
                info = _item_info(item)
                info["skipped"] = any(m.name == "skip" for m in item.iter_markers())
                self.items.append(info)

    collector = Collector()
    args = ["--collect-only", "-q", "-p", "no:cacheprovider", "--impl=reference", "tests/", "tests/staff/hidden",
            "--ignore=tests/staff/mutants", "--ignore=tests/staff/grader", "--ignore=tests/staff/alt_impl",
            f"--rootdir={ROOT}"]  # fmt: skip
    with contextlib.redirect_stdout(io.StringIO()), contextlib.chdir(ROOT):
        pytest.main(args, plugins=[collector])
    return collector.items


def conftest_tasks() -> dict[int, int]:
    """tests/conftest.py's TASKS (part -> number of tasks), read as text: the pytest process owns conftest."""
    text = (ROOT / "tests" / "conftest.py").read_text()
    body = re.search(r"^TASKS = \{(.*?)^\}", text, re.S | re.M)
    return {int(k): int(v) for k, v in re.findall(r"^\s*(\d+):\s*(\d+),", body[1] if body else "", re.M)}


# -- checks ----------------------------------------------------------------------------------------------


def problems(rubric: Rubric, items: list[dict]) -> list[str]:
    found = []
    for part in rubric.parts.values():
        for key in ("points", "hidden_points"):
            if getattr(part, key) != round(getattr(part, key)):
                found.append(f"[parts.{part.name}] {key} = {getattr(part, key)}: use whole points")
        if any(v != round(v) for v in part.tasks.values()):
            found.append(f"[parts.{part.name}.tasks]: use whole points ({part.tasks})")
        if sum(part.tasks.values()) != part.points:
            found.append(f"[parts.{part.name}.tasks] add up to {_fmt(sum(part.tasks.values()))}, "
                         f"not the part's {_fmt(part.points)} points")  # fmt: skip
        if not files_of(part.files):
            found.append(f"[parts.{part.name}]: no public test file matches {list(part.files)}")
        if part.hidden_points and not files_of(part.hidden_files):
            found.append(
                f"[parts.{part.name}]: hidden_points = {part.hidden_points:g} but no hidden test file matches "
                f"{list(part.hidden_files)}; add a hidden test or set hidden_points = 0"
            )
    budgets = sum(p.budget_s for p in rubric.parts.values())
    if budgets >= DEFAULT_TIMEOUT_S:
        found.append(
            f"the parts' budget_s sum to {_fmt(budgets)} s, not under the grader's default --timeout "
            f"({_fmt(DEFAULT_TIMEOUT_S)} s): a submission that hangs everywhere would not finish its grade"
        )
    for path in files_of(["tests/test_*.py", "tests/staff/hidden/test_*.py"]):
        if path not in UNGRADED and rubric.part_of(path) is None:
            found.append(f"{path}: in no entry of the rubric, so never graded")
    found += _task_problems(rubric, items)
    want = conftest_tasks()
    for number in sorted({p.number for p in rubric.parts.values()}):
        listed = sorted(t for p in rubric.parts.values() if p.number == number for t in p.tasks)
        expected = [f"{number}.{t}" for t in range(1, want.get(number, 0) + 1)]
        if listed != expected:
            found.append(f"part {number}: the rubric's tasks {listed} differ from tests/conftest.py's TASKS {expected}")
    for w in rubric.written:
        if w.points != round(w.points):
            found.append(f"[[written]] {w.heading!r}: use whole points")
        if _heading_line(w.part, w.heading) is None:
            found.append(f"[[written]] part {w.part}: no heading '## {w.heading}...' in {handout_of(w.part)}")
    return found


def _task_problems(rubric: Rubric, items: list[dict]) -> list[str]:
    found, marked = [], {}
    by_number = {}
    for part in rubric.parts.values():
        by_number.setdefault(part.number, set()).update(part.tasks)
    for item in items:
        found_part = rubric.part_of(item["file"])
        if found_part is None or excluded(rubric, item) or item["skipped"]:
            continue
        part, pool = found_part
        tasks = tasks_of(item["markers"], part.number)
        if not tasks:
            found.append(f"{item['nodeid']}: no task marker of part {part.number} (task{part.number}_<t>): "
                         "its points would have no task")  # fmt: skip
        for task in tasks - (set(part.tasks) if pool == "public" else by_number[part.number]):
            found.append(f"{item['nodeid']}: marked with task {task}, which [parts.{part.name}.tasks] does not list")
        if pool == "public":
            for task in tasks:
                marked.setdefault((part.name, task), 0)
                marked[(part.name, task)] += 1
    for part in rubric.parts.values():
        for task in part.tasks:
            if (part.name, task) not in marked:
                found.append(
                    f"[parts.{part.name}.tasks] task {task}: no public test is marked with it; its points drop"
                )
    return found


# -- the handouts ------------------------------------------------------------------------------------------


def handout_of(number: int) -> Path | None:
    found = sorted((ROOT / "handouts").glob(f"{number:02d}-*.md"))
    return found[0] if found else None


def _heading_line(number: int, start: str) -> str | None:
    path = handout_of(number)
    if path is None:
        return None
    return next((ln for ln in path.read_text().splitlines() if ln.startswith(f"## {start}")), None)


def _title(number: int, task: str) -> str:
    """A task's title from its heading, without points: ``1.5 ring all_reduce (5 pts)`` -> ``ring all_reduce``."""
    line = _heading_line(number, f"{task} ")
    if line is None:
        return ""
    return HEADING.match(line)["title"].removeprefix(f"{task} ").strip()


def block(rubric: Rubric, number: int) -> str:
    parts = [p for p in rubric.parts.values() if p.number == number]
    public = sum(p.points for p in parts)
    hidden = sum(p.hidden_points for p in parts)
    lines = [
        BEGIN,
        "<!-- written by `python -m scripts.grading.points --write` from scripts/grading/rubric.toml; edit that -->",
        "",
        "| task | what | points |",
        "|---|---|---:|",
    ]
    for p in parts:
        for task, pts in p.tasks.items():
            title = _title(number, task)  # a title naming its own module ("(`accounting.py`)") keeps it
            module = f" (`{p.name}.py`)" if len(parts) > 1 and ".py`)" not in title else ""
            lines.append(f"| {task} | {title}{module} | {_fmt(pts)} |")
    for p in parts:
        if p.hidden_points:
            where = f" of `{p.name}`" if len(parts) > 1 else ""
            lines.append(f"| | hidden tests{where} (other sizes, seeds and settings; shown after grades are published) "
                         f"| {_fmt(p.hidden_points)} |")  # fmt: skip
    lines.append(f"| | **autograded** ({_fmt(public)} public + {_fmt(hidden)} hidden) | **{_fmt(public + hidden)}** |")
    for w in (w for w in rubric.written if w.part == number):
        label = HEADING.match(f"## {w.heading}")["title"]
        lines.append(f"| | {label}: graded by hand, not in the autograder's total | {_fmt(w.points)} |")
    lines += [
        "",
        "A task's points are shared by the tests marked with it (`pytest -m task<p>_<t>` runs them).",
        "",
        END,
    ]
    return "\n".join(lines)


def _rewrite_headings(text: str, rubric: Rubric, number: int) -> str:
    """Put the rubric's points into the headings of the part's tasks and written problems."""
    wanted = {f"{t} ": (pts, "") for p in rubric.parts.values() if p.number == number for t, pts in p.tasks.items()}
    wanted.update({w.heading: (w.points, "" if "ritten" in w.heading else "written, ")
                   for w in rubric.written if w.part == number})  # fmt: skip
    out = []
    for line in text.splitlines(keepends=True):
        m = HEADING.match(line.rstrip("\n"))
        start = next((s for s in wanted if line.startswith(f"## {s}")), None) if m else None
        if start is not None:
            pts, kind = wanted[start]
            line = f"## {m['title']} ({kind}{_pts(pts)})\n"
        out.append(line)
    return "".join(out)


AUTOGRADED_HEADING = re.compile(r"^(## .*?\()\d+( autograded\).*)$", re.M)  # "## ... (12 autograded)"


def autograded(rubric: Rubric, number: int) -> float:
    return sum(p.points + p.hidden_points for p in rubric.parts.values() if p.number == number)


# -- numbers in the guide and the README, generated -------------------------------------------------------------

INLINE = re.compile(r"<!--=(\w+)-->(.*?)<!--/-->")  # <!--=autograded-->164<!--/-->: the value between is generated
REGION = re.compile(r"(<!-- (\w+):begin -->\n)(.*?)(<!-- \2:end -->)", re.S)
WORKLOAD = re.compile(r"^\*\*Workload:\*\* about (\d+(?:\.\d+)?) hours", re.M)
WORDS = "zero one two three four five six seven eight nine ten eleven twelve".split()
# The README's assignments: (assignment, the parts text, each alternative's parts, what the row adds in words).
# Hours are the sums of the handouts' Workload lines; given code comes from scripts/grading/subset.py.
ASSIGNMENTS = (
    ("1 week", "2 + 6 (DDP, accounting) — or 1 alone", ((2, 6), (1,))),
    ("2 weeks", "1 + 2 + 6 (collectives, DDP, accounting) — or 2 + 3 + 6", ((1, 2, 6), (2, 3, 6))),
    ("3 weeks", "1 + 2 + 3 (+ 6) — or 2 + 3 + 4 + 6", ((1, 2, 3), (1, 2, 3, 6), (2, 3, 4, 6))),
    ("3 weeks, advanced", "4 + 5 + 7 (TP, pipeline, composing them)", ((4, 5, 7),)),
    ("2 weeks, reliability", "10 (checkpoints, restarts, live recovery)", ((10,),)),
    ("a term", "parts 1-10, as five assignments (1-2, 3-4 + 6, 5 + 7, 8-9, 10)", (tuple(range(1, 11)),)),
)


def workload_hours() -> dict[int, float]:
    """{part: hours} from each handout's ``**Workload:** about N hours`` line."""
    hours = {}
    for path in sorted((ROOT / "handouts").glob("[0-9][0-9]-*.md")):
        m = WORKLOAD.search(path.read_text())
        if m:
            hours[int(path.name[:2])] = float(m.group(1))
    return hours


def entry_count(rubric: Rubric, items: list[dict]) -> int:
    """How many Gradescope entries a full grade has: the graded test functions, public and hidden (one entry each,
    whatever its cases), as ``rubric.score`` groups ``items``."""
    return len({(i["file"], i["function"]) for i in items if rubric.part_of(i["file"]) and not excluded(rubric, i)})


def numbers(rubric: Rubric, items: list[dict] | None = None) -> dict[str, str]:
    """The guide's inline numbers: what ``<!--=name-->`` stands for. ``entries`` needs the collected ``items``
    (pytest's collection, a few seconds): without them it is collected here."""
    parts = sorted({p.number for p in rubric.parts.values()})
    return {
        "entries": str(entry_count(rubric, collect_items() if items is None else items)),
        "parts": WORDS[len(parts)] if len(parts) < len(WORDS) else str(len(parts)),
        "autograded": _fmt(sum(p.points + p.hidden_points for p in rubric.parts.values())),
        "public": _fmt(sum(p.points for p in rubric.parts.values())),
        "hidden": _fmt(sum(p.hidden_points for p in rubric.parts.values())),
        "written": _fmt(sum(w.points for w in rubric.written)),
        "budget_total": _fmt(sum(p.budget_s for p in rubric.parts.values())),
        "budget_minutes": _fmt(round(sum(p.budget_s for p in rubric.parts.values()) / 60)),
        "timeout": _fmt(DEFAULT_TIMEOUT_S),
    }


def budget_table(rubric: Rubric) -> str:
    by_part: dict[int, list] = {}
    for p in rubric.parts.values():
        by_part.setdefault(p.number, []).append(p)
    lines = ["| part | module(s) | budget |", "|---|---|---:|"]
    for number, ps in sorted(by_part.items()):
        budgets = {_fmt(p.budget_s) for p in ps}
        budget = f"{budgets.pop()} s" + (" each" if len(ps) > 1 else "") if len(budgets) == 1 else ", ".join(
            f"{_fmt(p.budget_s)} s" for p in ps)  # fmt: skip
        lines.append(f"| {number} | {', '.join(p.name for p in ps)} | {budget} |")
    total = sum(p.budget_s for p in rubric.parts.values())
    lines.append(f"| all | {len(rubric.parts)} entries | **{_fmt(total)} s** (+ one test's overrun per part), under "
                 f"`--timeout` {_fmt(DEFAULT_TIMEOUT_S)} s |")  # fmt: skip
    return "\n".join(lines) + "\n"


def _hours(parts, hours: dict[int, float]) -> float:
    return sum(hours.get(p, 0) for p in parts)


def hours_table(hours: dict[int, float]) -> str:
    from scripts.grading import subset

    owner = subset.module_parts()
    lines = ["| assignment | parts | hours | given code (`--parts` ships it) |", "|---|---|---|---|"]
    for name, text, alternatives in ASSIGNMENTS:
        sums = sorted({_hours(a, hours) for a in alternatives})
        span = f"~{_fmt(sums[0])}" if len(sums) == 1 else f"~{_fmt(sums[0])}-{_fmt(sums[-1])}"
        given = sorted(subset.given_modules(frozenset(alternatives[0])), key=lambda m: (owner[m], m))
        by = {}
        for m in given:
            by.setdefault(owner[m], []).append(f"`{m}`")
        words = "; ".join(f"part {n}: {', '.join(ms)}" for n, ms in by.items()) or "none"
        lines.append(f"| {name} | {text} | {span} | {words} |")
    per = ", ".join(f"{n} ≈ {_fmt(h)} h" for n, h in sorted(hours.items()))
    lines += ["", f"Per part (each handout's `**Workload:**` line): {per}; the hours above are their sums."]
    return "\n".join(lines) + "\n"


def generated_docs(rubric: Rubric, items: list[dict] | None = None) -> dict[Path, str]:
    """{path: its text with every generated number and region rewritten} for the guide and the README."""
    values = numbers(rubric, items)
    regions = {"budgets": budget_table(rubric), "hours": hours_table(workload_hours())}
    out = {}
    for path in (ROOT / "handouts" / "grading.md", ROOT / "README.md"):
        if not path.exists():
            continue
        text = path.read_text()
        new = INLINE.sub(lambda m: f"<!--={m[1]}-->{values.get(m[1], m[2])}<!--/-->", text)
        new = REGION.sub(lambda m: m[1] + regions.get(m[2], m[3]) + m[4] if m[2] in regions else m[0], new)
        out[path] = new
    return out


def doc_problems(rubric: Rubric, items: list[dict] | None = None) -> list[str]:
    """Inline names the generator does not know (a typo would freeze a number)."""
    values = numbers(rubric, items if items is not None else [])  # only the names matter here: nothing collected
    found = []
    for path in (ROOT / "handouts" / "grading.md", ROOT / "README.md"):
        if path.exists():
            found += [f"{path.relative_to(ROOT)}: <!--={m[1]}--> is not a generated number ({', '.join(values)})"
                      for m in INLINE.finditer(path.read_text()) if m[1] not in values]  # fmt: skip
    return found


def sync(rubric: Rubric, write: bool, items: list[dict] | None = None) -> list[str]:
    """Rewrite (or check) each handout's block and headings, the guide's and the README's generated numbers;
    handouts without markers are skipped. ``items``: the collected tests (collected here when not given)."""
    stale = []
    for path, new in generated_docs(rubric, items).items():
        if new != path.read_text():
            stale.append(f"{path.relative_to(ROOT)}: a generated number or table disagrees with the rubric or the "
                         "handouts' Workload lines")  # fmt: skip
            if write:
                path.write_text(new)
    for number in sorted({p.number for p in rubric.parts.values()}):
        path = handout_of(number)
        if path is None or BEGIN not in path.read_text():
            continue
        text, table = path.read_text(), block(rubric, number)
        new = re.sub(re.escape(BEGIN) + r".*?" + re.escape(END), lambda _, table=table: table, text, flags=re.S)
        new = _rewrite_headings(new, rubric, number)
        total = _fmt(autograded(rubric, number))
        new = AUTOGRADED_HEADING.sub(lambda m, total=total: f"{m[1]}{total}{m[2]}", new)
        if new != text:
            stale.append(f"{path.relative_to(ROOT)}: points block or headings disagree with the rubric")
            if write:
                path.write_text(new)
    return stale


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the handouts' points blocks and headings")
    mode.add_argument("--check", action="store_true", help="fail if anything disagrees with the rubric")
    args = parser.parse_args()
    rubric = load_rubric()
    print("| part | entry | public (per task) | hidden |")
    for p in rubric.parts.values():
        per_task = ", ".join(f"{t}: {_fmt(v)}" for t, v in p.tasks.items())
        print(f"| {p.number} | {p.name} | {_fmt(p.points)} ({per_task}) | {_fmt(p.hidden_points)} |")
    grand = sum(p.points + p.hidden_points for p in rubric.parts.values())
    items = collect_items()
    written, budgets = sum(w.points for w in rubric.written), sum(p.budget_s for p in rubric.parts.values())
    print(f"grader maximum: {grand:g} points in {entry_count(rubric, items)} entries; written problems, by hand: "
          f"{_fmt(written)}; time budgets: {_fmt(budgets)} s in all")  # fmt: skip
    stale = sync(rubric, write=args.write, items=items)
    if args.write:
        print("\n".join(f"rewrote {s.split(':')[0]}" for s in stale) or "handouts already current")
        return 0
    if args.check:
        errors = problems(rubric, items) + doc_problems(rubric, items) + stale
        for e in errors:
            print(f"FAIL: {e}", file=sys.stderr)
        return 1 if errors else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
