"""Grades made on a GPU node, delivered to Gradescope, whose own autograder runs on CPUs (staff only).

    # on the GPU node, after grading Gradescope's "Export Submissions" folder as a batch:
    python -m scripts.grading --batch export/ --backend nccl --world-sizes 2,4,8 --results-dir node-results/
    python -m scripts.grading.gpu_results pack export/ node-results/ --out out/gpu-results.json \\
        --csv out/gpu-grades.csv --into out/autograder.zip

``pack`` matches each graded submission folder with its results JSON and writes one bundle: the fingerprint of
the part modules the grader read from the submission -> that results JSON (marked as graded on the node). With
``--into`` it adds the bundle to an autograder zip (``make_autograder_zip``'s) as ``gpu-results.json``: upload
that zip ("Update Autograder") and "Regrade All Submissions". For each submission Gradescope's
``run_autograder`` asks the grader with ``--precomputed``: when the fingerprint of what the student submitted
is in the bundle, its results are the grade and nothing runs; otherwise (a late or changed submission) the
submission is graded on Gradescope's CPU as usual, and the output says it was not graded on the GPU node.

``pack`` refuses (exit 1, nothing written) a batch whose results graded other parts, or to another maximum, than
the kit they are delivered in (the zip's own rubric with ``--into``, else ``--rubric``), naming each submission and
what differs: a bundle of ``--parts 2,4,6`` grades in a full kit's zip would give students 35.8 / 39. It refuses
results that graded other code than the export holds (the fingerprint each results.json records of what it graded
against the export's submission: a regrade of a changed copy merged into the results would otherwise be handed to
the original submission), and results graded on CPUs (gloo) unless each such submission is named with
``--allow-cpu``. Each result is labelled with the backend and world sizes its own grade recorded. A grade that
failed (no tests) is left out, so Gradescope grades that submission on its CPU.

``--csv`` also writes one row per student (name, SID, email from the export's ``submission_metadata.yml``,
score, maximum, submission id, the fingerprint of the code graded), for a gradebook or a manual upload where the
course prefers it.

The key is the kit's one fingerprint (scripts/grading/fingerprint.py): exactly the bytes the kit's grade takes from
the submission (the part modules it grades, chosen the same way, through a zip left inside the submission folder
too), so renaming the zip or adding a README keeps the GPU grade, and changing one graded byte loses it.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
import tempfile
import zipfile
from pathlib import Path

from scripts.grading.fingerprint import file_hashes, fingerprint, fingerprint_at, read_graded
from scripts.grading.rubric import RUBRIC_PATH, Rubric, load_rubric
from scripts.grading.sandbox import Submission, graded_modules, keep_graded

BUNDLE_NAME = "gpu-results.json"  # its name inside the autograder zip (run_autograder looks for it)
KIT_RUBRIC = "scripts/grading/rubric.toml"  # the kit's rubric, inside the autograder zip


class PackError(ValueError):
    """The batch's results do not fit the kit they would be delivered in; the message names each difference."""


def label(results: dict) -> str:
    """The students' first line: where and how this grade ran, as its own results recorded it."""
    settings = results.get("extra_data", {}).get("settings") or {}
    if not settings.get("backend") or not settings.get("world_sizes"):
        raise PackError("its results do not record their backend and world sizes (an older grader's): grade again")
    where = "NCCL on the staff's GPU node" if settings["backend"] == "nccl" else f"{settings['backend']} on CPUs"
    sizes = settings["world_sizes"].replace(",", ", ")
    return f"Graded by the staff ({where}, world sizes {sizes}); Gradescope shows that grade."


def kit_problems(results: dict, kit: Rubric) -> list[str]:
    """How the parts and maxima of ``results`` differ from the kit's (each part's points + hidden points)."""
    got: dict[str, float] = {}
    for t in results.get("tests", []):
        part = (t.get("tags") or ["?"])[0]
        got[part] = got.get(part, 0.0) + t.get("max_score", 0.0)
    want = {name: p.points + p.hidden_points for name, p in kit.parts.items()}
    found = []
    if set(got) != set(want):
        extra, missing = sorted(set(got) - set(want)), sorted(set(want) - set(got))
        found.append("graded parts " + ", ".join(sorted(got)) + " (maximum " + f"{sum(got.values()):g}); the kit's are "
                     + ", ".join(want) + f" (maximum {sum(want.values()):g})" + (f"; not in the kit: {', '.join(extra)}"
                     if extra else "") + (f"; not graded: {', '.join(missing)}" if missing else ""))  # fmt: skip
    found += [f"part {n}: maximum {got[n]:g}, the kit's {want[n]:g}" for n in want if n in got
              and abs(got[n] - want[n]) > 1e-6]  # fmt: skip
    return found


def kit_rubric(zip_path: Path | None, rubric: Path) -> Rubric:
    """The rubric of the kit a bundle is delivered in: the zip's own, else ``rubric``."""
    if zip_path is None:
        return load_rubric(rubric)
    with zipfile.ZipFile(zip_path) as zf, tempfile.TemporaryDirectory() as tmp:
        if KIT_RUBRIC not in zf.namelist():
            raise PackError(f"{zip_path} holds no {KIT_RUBRIC}: is it make_autograder_zip's?")
        path = Path(tmp) / "rubric.toml"
        path.write_bytes(zf.read(KIT_RUBRIC))
        return load_rubric(path)


def read_metadata(export: Path) -> dict[str, list[dict[str, str]]]:
    """``submission_<id>`` -> its submitters (name, sid, email) from Gradescope's ``submission_metadata.yml``.

    The file is YAML with Ruby symbols (``:submitters:``, ``- :name: Ada``); only those fields are read, with a
    line parser, so the kit needs no YAML library. A missing file gives {} (the CSV then names folders only)."""
    path = export / "submission_metadata.yml"
    if not path.exists():
        return {}
    out: dict[str, list[dict[str, str]]] = {}
    current, person = None, None
    for line in path.read_text().splitlines():
        top = re.match(r"^(submission_\w+):\s*$", line)
        if top:
            current, person = top.group(1), None
            out[current] = []
            continue
        field = re.match(r"^\s*(-\s+)?:(name|sid|email):\s*(.*?)\s*$", line)
        if current and field:
            if field.group(1) or person is None:  # "- :name:" opens the next submitter
                person = {}
                out[current].append(person)
            person[field.group(2)] = field.group(3).strip("'\"")
    return out


def code_problem(results: dict, export_sub: Path, modules) -> str | None:
    """Why ``results`` are not a grade of the code the export holds for this submission (None when they are): the
    fingerprint they recorded of what they graded (``extra_data["graded"]``) against that of the export's
    submission, as the kit's grade reads it (the bundle's key), naming the files that differ."""
    graded = (results.get("extra_data") or {}).get("graded") or {}
    if not graded.get("fingerprint"):
        return "its results record no fingerprint of the code they graded (an older grader's): grade it again"
    now = fingerprint_at(export_sub, modules)
    if graded["fingerprint"] == now:
        return None
    if now.startswith("unreadable"):
        return f"the export's submission cannot be read ({now}); its results graded {graded['fingerprint'][:16]}"
    mine = file_hashes(keep_graded(read_graded(export_sub), frozenset(modules)))
    theirs = graded.get("files", {})
    differ = sorted(n for n in set(mine) | set(theirs) if mine.get(n) != theirs.get(n))
    return (f"its results graded other code than the export holds (fingerprint {graded['fingerprint'][:16]}, the "
            f"export's {now[:16]}; differing: {', '.join(differ) or 'the modules graded'}): grade this submission "
            "again from the export (a regrade merged from other bytes, or results of another export)")  # fmt: skip


def pack(export: Path, results_dir: Path, kit: Rubric, cpu_ok: frozenset[str] = frozenset()) -> tuple[dict, list[dict]]:
    """The bundle (fingerprint -> results) and one CSV row per submitter; ``PackError`` naming every submission
    whose results differ from ``kit`` (parts or maximum), do not say how they were graded, graded other code than
    the export holds (``code_problem``), or ran on CPUs (gloo) when the submission is not named in ``cpu_ok``."""
    metadata = read_metadata(export)
    modules = graded_modules(list(kit.parts))  # what the kit's grade takes from a submission: the bundle's key
    bundle, rows, problems = {}, [], []
    subs = sorted(p for p in export.iterdir() if p.is_dir() or p.suffix == ".zip")
    unknown = sorted(cpu_ok - {p.name for p in subs} - {p.stem for p in subs})
    problems += [f"--allow-cpu {name}: no such submission in {export}" for name in unknown]
    for sub_path in subs:
        result_path = results_dir / f"{sub_path.stem}.json"
        if not result_path.exists():
            print(f"{sub_path.name}: no results in {results_dir} (not graded?); left out", file=sys.stderr)
            continue
        results = json.loads(result_path.read_text())
        if not results.get("tests"):
            print(f"{sub_path.name}: its grade failed (no tests); left out, Gradescope grades it", file=sys.stderr)
            continue
        try:
            results["output"] = label(results) + "\n\n" + results.get("output", "")
        except PackError as exc:
            problems.append(f"{sub_path.name}: {exc}")
        backend = ((results.get("extra_data") or {}).get("settings") or {}).get("backend")
        if backend and backend != "nccl" and not {sub_path.name, sub_path.stem} & cpu_ok:
            problems.append(f"{sub_path.name}: graded on CPUs ({backend}), not on the GPU node: grade it on the node, "
                            f"or deliver this CPU grade on purpose with --allow-cpu {sub_path.stem}")  # fmt: skip
        problems += [f"{sub_path.name}: {p}" for p in kit_problems(results, kit)]
        problem = code_problem(results, sub_path, modules)
        if problem:
            problems.append(f"{sub_path.name}: {problem}")
        bundle[fingerprint_at(sub_path, modules)] = results
        maximum = round(sum(t.get("max_score", 0) for t in results.get("tests", [])), 2)
        for person in metadata.get(sub_path.stem, [{}]):
            rows.append({"name": person.get("name", ""), "sid": person.get("sid", ""),
                         "email": person.get("email", ""), "score": results.get("score", 0),
                         "max_score": maximum, "submission": sub_path.stem,
                         "fingerprint": fingerprint_at(sub_path, modules)})  # fmt: skip
    if problems:
        shown = problems[:20] + ([f"... and {len(problems) - 20} more"] if len(problems) > 20 else [])
        raise PackError("not packed: these results cannot be delivered in the kit (" + ", ".join(kit.parts)
                        + "):\n  " + "\n  ".join(shown))  # fmt: skip
    return bundle, rows


def lookup(bundle_path: Path, sub: Submission) -> dict | None:
    """The node's results for this submission (what the kit grades of it: ``keep_graded``), or None (no bundle, or
    the submission is not in it)."""
    if not bundle_path.exists():
        return None
    return json.loads(bundle_path.read_text()).get(fingerprint(sub))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    k = sub.add_parser("pack", help="bundle a batch's results for Gradescope")
    k.add_argument("export", type=Path, help="the graded submissions (Gradescope's export, unzipped)")
    k.add_argument("results", type=Path, help="the batch's results folder (--results-dir)")
    k.add_argument("--out", type=Path, default=Path("out") / BUNDLE_NAME)
    k.add_argument("--csv", type=Path, help="also write one row per student here")
    k.add_argument("--into", type=Path, help="add the bundle to this autograder zip as " + BUNDLE_NAME)
    k.add_argument("--rubric", type=Path, default=RUBRIC_PATH, help="without --into: the kit's rubric, which every "
                   "result must match in parts and maximum (default scripts/grading/rubric.toml)")  # fmt: skip
    k.add_argument("--allow-cpu", action="append", default=[], metavar="SUBMISSION",
                   help="deliver this submission's CPU (gloo) grade as it is (repeat, or comma-separate; by its name "
                   "in the export): without it, CPU results are refused")  # fmt: skip
    args = p.parse_args(argv)
    for name in ("export", "results"):
        if not getattr(args, name).is_dir():
            k.error(f"{name}: {getattr(args, name)} is not a folder")
    if args.into is not None and not zipfile.is_zipfile(args.into):
        k.error(f"--into: {args.into} is not a zip (make_autograder_zip writes one)")
    cpu_ok = frozenset(n.strip() for value in args.allow_cpu for n in value.split(",") if n.strip())
    try:
        bundle, rows = pack(args.export, args.results, kit_rubric(args.into, args.rubric), cpu_ok)
    except PackError as exc:
        print(exc, file=sys.stderr)
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(bundle))
    print(f"{args.out}: {len(bundle)} graded submissions")
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, ["name", "sid", "email", "score", "max_score", "submission", "fingerprint"])
            writer.writeheader()
            writer.writerows(rows)
        print(f"{args.csv}: {len(rows)} rows")
    if args.into:
        with zipfile.ZipFile(args.into, "a") as zf:
            if BUNDLE_NAME in zf.namelist():
                raise SystemExit(f"{args.into} already holds {BUNDLE_NAME}: build a fresh zip (make_autograder_zip)")
            zf.write(args.out, BUNDLE_NAME)
        print(f"{args.into}: now holds {BUNDLE_NAME}; upload it (Update Autograder), then Regrade All Submissions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
