"""The fingerprint of the code a grade took from a submission: one function for the whole kit.

    fingerprint(sub)                  # 64 hex digits: what the grade imported from the submission
    graded_record(sub)                # what results.json keeps: {"fingerprint", "files", "modules"}
    fingerprint_at(path, modules)     # the same for a submission on disk, as a grade taking `modules` reads it

**What it covers.** Every file the grade imports from the submission, and nothing else: the part modules that
the kit grades (``sandbox.keep_graded``; a grade of some parts from the staff checkout takes only those parts'
modules and ``accounting.py``, ``sandbox.kit_submission``), read as the grader reads them (``read_graded``: a
zip left inside a submission folder is read through). Given code, tests, READMEs and the zip's own name are not
graded and do not count: a renamed zip keeps its fingerprint, one changed byte of a graded module changes it.

**The stated order.** SHA-256 over one line per module taken from the submission, in the order of the modules'
names (Python's string order): ``<module>.py <SHA-256 of its bytes, 64 lowercase hex digits>\\n``. A module the
grade would have taken but the submission lacks has no line (it was graded as the stub). Since the lines hold
only each file's own hash, the fingerprint of a merged grade (a regrade of some parts folded into a full grade)
is computed from the files' hashes that the two results record, without the bytes (``fingerprint_of``).

Every place that names a grade's code uses it: ``extra_data["graded"]`` of every results.json, the batch's CSV
and dashboard, ``--merge-into`` (a regrade of other bytes is refused), ``gpu_results pack`` and Gradescope's
``--precomputed`` lookup (the bundle's key), and the cluster's done records (``cluster/store.py``).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

from scripts.grading.sandbox import Submission, SubmissionError, keep_graded, read_submission

UPLOAD = ("upload the submission.zip that `python -m scripts.tools.submission` writes, as it is (Gradescope "
          "unpacks it): not a folder or another zip around it")  # fmt: skip


def file_hashes(sub: Submission) -> dict[str, str]:
    """``{"<module>.py": SHA-256 hex of its bytes}`` for each module taken from the submission."""
    return {f"{module}.py": hashlib.sha256(data).hexdigest() for module, data in sub.modules.items()}


def fingerprint_of(files: dict[str, str]) -> str:
    """The fingerprint of a grade whose files (``"<module>.py"`` -> SHA-256 hex) are ``files``: the stated order
    of the module docstring."""
    lines = "".join(f"{name} {files[name]}\n" for name in sorted(files))
    return hashlib.sha256(lines.encode()).hexdigest()


def fingerprint(sub: Submission) -> str:
    """SHA-256 over the modules a grade takes from ``sub`` (already narrowed to the kit: ``keep_graded``)."""
    return fingerprint_of(file_hashes(sub))


def graded_record(sub: Submission) -> dict:
    """What a results.json records of the code it graded (``extra_data["graded"]``): the fingerprint, each file's
    hash, and the modules the grade took from the submission where present (a listed module without a file was
    graded as the stub)."""
    modules = sorted(sub.graded) if sub.graded is not None else sorted(sub.modules)
    return {"fingerprint": fingerprint(sub), "files": file_hashes(sub), "modules": modules}


def read_graded(path: Path) -> Submission:
    """The part modules the grader reads (``read_submission``). A folder that holds none but one zip that does (a
    student's submission.zip uploaded beside other files, or zipped again, which Gradescope unpacks once) is read
    through that zip, with a note; with several such zips none is graded, and the notes say what to upload."""
    sub = read_submission(path)
    if sub.modules or not path.is_dir():
        return sub
    zips = sorted(Path(d) / n for d, _, names in os.walk(path) for n in names if n.lower().endswith(".zip"))
    inside = []
    for z in zips:
        try:
            inner = read_submission(z)
        except SubmissionError:
            continue
        if inner.modules and not z.is_symlink():
            inside.append((z.relative_to(path).as_posix(), inner))
    if len(inside) == 1:
        name, inner = inside[0]
        inner.notes.insert(0, f"graded the part modules in {name}, a zip inside your submission; next time {UPLOAD}")
        return inner
    if inside:
        names = ", ".join(n for n, _ in inside)
        sub.notes.append(f"{len(inside)} zips inside your submission hold part modules ({names}): none was graded; "
                         f"{UPLOAD}")  # fmt: skip
    return sub


def fingerprint_at(path: Path, modules: Iterable[str]) -> str:
    """The fingerprint a grade taking ``modules`` from the submission at ``path`` records; ``unreadable: ...``
    (never a fingerprint) when it cannot be read."""
    try:
        return fingerprint(keep_graded(read_graded(path), frozenset(modules)))
    except SubmissionError as exc:
        return f"unreadable: {exc}"
