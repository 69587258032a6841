"""``collect R``: the outputs of a one-node ``--batch`` of the same export, from the cluster's results.

A one-node batch leaves, in its results folder: each submission's results JSON and staff log (the cluster's tasks
put them in R the same way), the dashboard (``summary.md``, ``summary.json``, ``dashboard.png``, ``grades.png``:
``summary.write_summary`` over the results, keyed by the submission's name in the export as the batch keys them)
and a CSV of the rows the batch made (``summary.grade_row``, from each results JSON, with the status each task's
batch gave it, kept in R/.cluster/done/; summary.json records where, so a merge into R rewrites it). R is then
what ``gpu_results pack EXPORT R`` reads. Only counted results are collected (store.py); the rest are listed.
"""

from __future__ import annotations

import json
from pathlib import Path

from scripts.grading.cluster.shards import export_submissions
from scripts.grading.cluster.store import Store
from scripts.grading.summary import SUMMARY_MD, grade_row, write_grades_csv, write_summary


def collect(store: Store, csv_path: Path | None) -> int:
    export = Path(store.config["export"])
    names = [p.name for p in export_submissions(export)]
    records = {n: store.done(n) for n in names}
    missing = [n for n, r in records.items() if r is None]
    results = {n: json.loads(store.results_path(n).read_text()) for n in sorted(records) if records[n]}
    # As the batch writes them, from the results (a regrade merged into R since shows), the status as graded.
    rows = [grade_row(n, results[n], records[n]["row"].get("status")) for n in results]
    csv_path = csv_path or store.root / "grades.csv"
    write_grades_csv(rows, csv_path)
    write_summary(results, store.root, csv_path=csv_path)
    print(f"{csv_path}: {len(rows)} rows; dashboard: {store.root / SUMMARY_MD}")
    print(f"for Gradescope: python -m scripts.grading.gpu_results pack {export} {store.root} --out "
          "out/gpu-results.json --csv out/gpu-grades.csv --into out/autograder.zip")  # fmt: skip
    if missing:
        print(f"{len(missing)} submissions have no result yet (status, resubmit --missing): {', '.join(missing)}")
        return 1
    return 0
