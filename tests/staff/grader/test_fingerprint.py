"""One fingerprint of the graded code for the whole kit (scripts/grading/fingerprint.py; staff only).

    pytest tests/staff/grader/test_fingerprint.py -v

The fingerprint is computed here from its stated definition (SHA-256 over ``<module>.py <SHA-256 of its bytes>``
lines, one per module the grade takes from the submission, in name order) and compared with what the grader, the
GPU bundle and the cluster's store compute. No test runs a grade: each takes well under a second.
"""

from __future__ import annotations

import hashlib
import json
import zipfile

import pytest

from scripts.grading import gpu_results
from scripts.grading.cluster.store import Store
from scripts.grading.fingerprint import fingerprint, fingerprint_at, fingerprint_of, graded_record, read_graded
from scripts.grading.rubric import load_rubric
from scripts.grading.sandbox import graded_modules, keep_graded, kit_submission, read_submission
from scripts.tools.submission import PART_MODULES

pytestmark = pytest.mark.staff

DDP, COLLECTIVES, MODELS = b"class DDP: ...\n", b"def broadcast(t, src=0): ...\n", b"# given code\n"


def _stated(modules: dict[str, bytes]) -> str:
    """The fingerprint as handouts/grading.md states it, computed independently of the kit's code."""
    lines = "".join(f"{m}.py {hashlib.sha256(modules[m]).hexdigest()}\n" for m in sorted(modules))
    return hashlib.sha256(lines.encode()).hexdigest()


@pytest.fixture
def folder(tmp_path):
    root = tmp_path / "submission_7"
    (root / "cs336_systems").mkdir(parents=True)
    (root / "cs336_systems" / "ddp.py").write_bytes(DDP)
    (root / "cs336_systems" / "collectives.py").write_bytes(COLLECTIVES)
    (root / "cs336_systems" / "models.py").write_bytes(MODELS)
    (root / "README.md").write_text("my notes\n")
    return root


def test_the_fingerprint_is_the_stated_hash_of_the_graded_modules_and_nothing_else(folder, tmp_path):
    """The stated order and content; a zip of the same modules, a README or given code (models.py) change
    nothing; a module the kit does not grade is left out; one changed byte of a graded module changes it."""
    want = _stated({"collectives": COLLECTIVES, "ddp": DDP})
    assert fingerprint_at(folder, PART_MODULES) == want
    with zipfile.ZipFile(tmp_path / "renamed.zip", "w") as zf:
        zf.writestr("x/cs336_systems/ddp.py", DDP)
        zf.writestr("x/cs336_systems/collectives.py", COLLECTIVES)
        zf.writestr("x/notes.txt", "other")
    assert fingerprint_at(tmp_path / "renamed.zip", PART_MODULES) == want
    (folder / "README.md").write_text("changed\n")
    (folder / "cs336_systems" / "models.py").write_bytes(b"# edited given code\n")
    assert fingerprint_at(folder, PART_MODULES) == want
    assert fingerprint_at(folder, ["ddp", "accounting"]) == _stated({"ddp": DDP}), "an ungraded module counted"
    (folder / "cs336_systems" / "ddp.py").write_bytes(DDP.replace(b"...", b"... "))
    assert fingerprint_at(folder, PART_MODULES) != want
    assert fingerprint_at(tmp_path / "nothing.txt", PART_MODULES).startswith("unreadable")


def test_a_grades_record_names_what_its_run_imports_and_recomputes_from_the_file_hashes(folder):
    """A grade of parts 2 and 6 from the staff checkout imports ddp.py and accounting.py from the submission (the
    kit of those parts; Part 2 alone has no accounting task, so only ddp.py): its record lists those modules, hashes
    the one present and its fingerprint is computable from the file hashes alone (how a merge fingerprints the
    union of two grades)."""
    kit = load_rubric()
    sub = keep_graded(read_graded(folder), graded_modules(list(kit.parts)))
    assert fingerprint(sub) == _stated({"collectives": COLLECTIVES, "ddp": DDP})
    assert graded_record(kit_submission(sub, ["ddp"])[0])["modules"] == ["ddp"], "Part 2 has no accounting task"
    record = graded_record(kit_submission(sub, ["ddp", "accounting"])[0])
    assert record["modules"] == ["accounting", "ddp"], record
    assert record["files"] == {"ddp.py": hashlib.sha256(DDP).hexdigest()}
    assert record["fingerprint"] == _stated({"ddp": DDP}) == fingerprint_of(record["files"])
    assert record["fingerprint"] == fingerprint_at(folder, record["modules"])


def test_the_gpu_bundle_and_the_cluster_key_by_the_same_fingerprint(folder, tmp_path):
    """pack keys the bundle by the kit's graded modules' fingerprint, which the grader's lookup finds; the
    cluster's store counts a result whose record holds the results' fingerprint, and stops counting it when a
    graded byte of the export changes."""
    export = folder.parent
    kit = load_rubric()
    results = tmp_path / "R"
    results.mkdir()
    full = {"score": 1, "tests": [], "extra_data": {"graded": graded_record(read_submission(folder))}}
    (results / "submission_7.json").write_text(json.dumps(full))
    store = Store(results)
    store.save_config({"export": str(export), "grader_args": []})
    record = {"submission": "submission_7", "grader": store.version, **{k: full["extra_data"]["graded"][k]
              for k in ("fingerprint", "modules")}}  # fmt: skip
    (results / ".cluster" / "done").mkdir(parents=True)
    (results / ".cluster" / "done" / "submission_7.json").write_text(json.dumps(record))
    assert store.done("submission_7") is not None, "the cluster does not count a result of the same bytes"
    bundle = tmp_path / "bundle.json"
    bundle.write_text(json.dumps({fingerprint_at(folder, graded_modules(list(kit.parts))): full}))
    assert gpu_results.lookup(bundle, keep_graded(read_graded(folder), graded_modules(list(kit.parts)))) == full
    (folder / "cs336_systems" / "ddp.py").write_bytes(DDP + b"# one more line\n")
    assert store.done("submission_7") is None, "a changed graded byte kept the cluster's result"
