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

``--csv`` also writes one row per student (name, SID, email from the export's ``submission_metadata.yml``,
score, maximum, submission id), for a gradebook or a manual upload where the course prefers it.

The fingerprint covers exactly the bytes the grader grades (``read_submission``: the part modules, chosen the
same way), so renaming the zip or adding a README keeps the GPU grade, and changing one graded byte loses it.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import re
import sys
import zipfile
from pathlib import Path

from scripts.grading.sandbox import Submission, read_submission

BUNDLE_NAME = "gpu-results.json"  # its name inside the autograder zip (run_autograder looks for it)
NOTE = "Graded on the staff's GPU node (NCCL, world sizes {sizes}); Gradescope shows that grade."


def fingerprint(sub: Submission) -> str:
    """SHA-256 over the part modules the grader takes from a submission, by module name."""
    h = hashlib.sha256()
    for module in sorted(sub.modules):
        data = sub.modules[module]
        h.update(f"{module}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


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


def pack(export: Path, results_dir: Path, sizes: str) -> tuple[dict, list[dict]]:
    """The bundle (fingerprint -> results) and one CSV row per submitter."""
    metadata = read_metadata(export)
    bundle, rows = {}, []
    for sub_path in sorted(p for p in export.iterdir() if p.is_dir() or p.suffix == ".zip"):
        result_path = results_dir / f"{sub_path.stem}.json"
        if not result_path.exists():
            print(f"{sub_path.name}: no results in {results_dir} (not graded?); left out", file=sys.stderr)
            continue
        results = json.loads(result_path.read_text())
        results["output"] = NOTE.format(sizes=sizes) + "\n\n" + results.get("output", "")
        bundle[fingerprint(read_submission(sub_path))] = results
        maximum = round(sum(t.get("max_score", 0) for t in results.get("tests", [])), 2)
        for person in metadata.get(sub_path.stem, [{}]):
            rows.append({"name": person.get("name", ""), "sid": person.get("sid", ""),
                         "email": person.get("email", ""), "score": results.get("score", 0),
                         "max_score": maximum, "submission": sub_path.stem})  # fmt: skip
    return bundle, rows


def lookup(bundle_path: Path, sub: Submission) -> dict | None:
    """The node's results for this submission, or None (no bundle, or the submission is not in it)."""
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
    k.add_argument("--world-sizes", default="2,4,8", help="what the node graded at, for the students' note")
    args = p.parse_args(argv)
    bundle, rows = pack(args.export, args.results, args.world_sizes)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(bundle))
    print(f"{args.out}: {len(bundle)} graded submissions")
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, ["name", "sid", "email", "score", "max_score", "submission"])
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
