"""A grade's progress, on stderr: one line per part as its tests finish, and a bar where stderr is a terminal.

    part 2 ddp, public tests: 38.50 / 40.00  (25 s of its 150 s budget)
    part 2 ddp, hidden tests: 2.00 / 2.00  (31 s of its 150 s budget, public and hidden)

``python -m scripts.grading SUB`` (and ``bash scripts/main.sh``) grades for minutes; these lines tell a student or
a TA that it moves and where the points go, before the final table. The public tests of every part run first and
the hidden ones after, in a run of their own, so a part has a line for each. The lines go to stderr only:
results.json, the final table on stdout and a script reading either are unchanged. The batch captures each
grade's output and keeps its own bar.
"""

from __future__ import annotations

import sys
from typing import TextIO

from scripts.grading.rubric import Rubric, excluded, score


class Progress:
    """``update(pool, record)`` after each batch of results of a run (``runner.Settings.on_progress``)."""

    def __init__(self, rubric: Rubric, stream: TextIO | None = None, bar: bool | None = None):
        self.rubric = rubric
        self.stream = stream or sys.stderr
        self.use_bar = self.stream.isatty() if bar is None else bar
        self.bar = None
        self.pool = None
        self.done: set[tuple[str, str]] = set()  # (pool, part) already reported
        self.public_seconds: dict[str, float] = {}

    def _write(self, line: str) -> None:
        if self.bar is not None:
            self.bar.write(line, file=self.stream)
        else:
            print(line, file=self.stream, flush=True)

    def update(self, pool: str, record) -> None:
        items = [i for i in record.items if not excluded(self.rubric, i) and self.rubric.part_of(i["file"])]
        if pool != self.pool:
            self.close()
            self.pool = pool
        if self.use_bar and items:
            if self.bar is None:
                from tqdm import tqdm

                self.bar = tqdm(total=len(items), file=self.stream, unit="case", desc=f"{pool} tests", leave=False)
            self.bar.total = len(items)
            self.bar.n = sum(i["nodeid"] in record.outcomes for i in items)
            self.bar.refresh()
        by_part: dict[str, list[dict]] = {}
        for item in items:
            by_part.setdefault(self.rubric.part_of(item["file"])[0].name, []).append(item)
        for name, mine in by_part.items():
            if (pool, name) in self.done or not all(i["nodeid"] in record.outcomes for i in mine):
                continue
            self.done.add((pool, name))
            entries, _ = score(self.rubric, mine, record.outcomes)
            got, most = sum(e.score for e in entries), sum(e.max_score for e in entries)
            part, spent = self.rubric.parts[name], record.spent.get(name, 0.0)
            if pool == "public":
                self.public_seconds[name] = spent
                when = f"{spent:.0f} s of its {part.budget_s:.0f} s budget"
            else:
                spent += self.public_seconds.get(name, 0.0)
                when = f"{spent:.0f} s of its {part.budget_s:.0f} s budget, public and hidden"
            self._write(f"part {part.number} {name}, {pool} tests: {got:.2f} / {most:.2f}  ({when})")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
