"""What goes into a grading sandbox, and from where: staff files from memory, part modules from the submission.

    staff = StaffFiles.snapshot(REPO)             # read once, before any student code runs
    sub = read_submission(Path("sub.zip"))        # only the six part modules, as bytes
    build_sandbox(dest, staff, sub)               # rebuilt from memory before every pytest start

The sandbox holds the tests that reach the grading machine (staff.py says which; the public run's
sandbox has no hidden test: ``StaffFiles.without``, and the hidden tests run afterwards in their own),
the harness, pyproject.toml, the grading plugin, the given helpers of ``cs336_systems``
(``GIVEN_MODULES``: ``__init__``, ``models``, ``utils``, ``launcher``, ``transformer``: always the staff
copies) and the student's part modules (or the staff stub for a module the submission lacks). In a kit of
some parts, the modules of its given parts are the staff's copies too (``keep_graded``): only the modules its
rubric grades come from the submission. A grade of some parts from the staff checkout (``--parts 11``, or a
batch with it) stands for the kit of those parts (``kit_of_run``): its sandbox holds the part modules the kit
ships, made by the same function that cuts the kit (scripts/grading/subset.py: the reference for the modules
the graded parts build on, ``accounting.py`` with the graded parts' tasks as stubs), so a kit's student who
hands in only their own modules gets the same grade here as through the kit's Gradescope zip. It never holds
``reference_solutions``: a placeholder package of that name raises ImportError, so that a submission
importing the reference fails loudly instead of finding an installed copy.

Submissions are read, never extracted: no path from a zip ever reaches the file system, symlinks
are refused, and sizes are capped (a zip bomb stops at the cap).
"""

from __future__ import annotations

import functools
import os
import shutil
import stat
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from scripts.grading.staff import reaches_grading_machine
from scripts.tools.submission import MAX_MODULE_BYTES, PART_MODULES

REPO = Path(__file__).resolve().parents[2]

# The plugin is imported by this name inside the sandbox, from copies of these files (same paths as here).
PLUGIN_NAME = "scripts.grading.plugin"
PLUGIN_FILES = ("scripts/__init__.py", "scripts/grading/__init__.py", "scripts/grading/plugin.py",
                "scripts/grading/channel.py")  # fmt: skip
REFERENCE_PLACEHOLDER = '''"""Not available while grading."""

raise ImportError(
    "reference_solutions is the staff reference and is not available to submissions: "
    "implement the modules in cs336_systems yourself"
)
'''


class SubmissionError(ValueError):
    """The submission cannot be read at all (not a zip or a folder, unreadable zip)."""


@dataclass
class Submission:
    modules: dict[str, bytes] = field(default_factory=dict)  # part module name -> source
    notes: list[str] = field(default_factory=list)  # what the student should know (shown in the output)
    graded: frozenset[str] | None = None  # the modules the kit grades from it (None: every part module)


def _pick(candidates: dict[str, list[str]], notes: list[str]) -> dict[str, str]:
    """module -> chosen path: prefer a path inside a ``cs336_systems`` folder, then the shallowest."""
    chosen = {}
    for module, paths in candidates.items():
        paths = sorted(paths, key=lambda p: ("cs336_systems/" not in f"/{p}", p.count("/"), p))
        chosen[module] = paths[0]
        if len(paths) > 1:
            notes.append(f"{module}.py: several copies in the submission; graded {paths[0]}")
    return chosen


def _candidates(names: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name in names:
        parts = name.replace("\\", "/").split("/")
        if any(p in ("__MACOSX", "..") or p.startswith(".") for p in parts[:-1]):
            continue
        stem, _, ext = parts[-1].rpartition(".")
        if ext == "py" and stem in PART_MODULES:
            out.setdefault(stem, []).append("/".join(parts))
    return out


def read_submission(path: Path) -> Submission:
    """The part modules of a zip or a folder (``cs336_systems/x.py`` at any depth, or loose ``x.py``)."""
    sub = Submission()
    if path.is_dir():
        files = {}
        for dirpath, _dirs, names in os.walk(path):  # never follows a symlinked folder
            for name in names:
                p = Path(dirpath) / name
                files[p.relative_to(path).as_posix()] = p
        for module, rel in _pick(_candidates(list(files)), sub.notes).items():
            p = files[rel]
            st = p.lstat()
            if stat.S_ISLNK(st.st_mode):
                sub.notes.append(f"{rel}: a symbolic link; refused (submit the file itself)")
            elif st.st_size > MAX_MODULE_BYTES:
                sub.notes.append(f"{rel}: {st.st_size} bytes is over the {MAX_MODULE_BYTES} byte limit; refused")
            else:
                sub.modules[module] = p.read_bytes()
    elif zipfile.is_zipfile(path):
        try:
            with zipfile.ZipFile(path) as zf:
                infos = {i.filename: i for i in zf.infolist() if not i.is_dir()}
                for module, name in _pick(_candidates(list(infos)), sub.notes).items():
                    info = infos[name]
                    if stat.S_ISLNK(info.external_attr >> 16):
                        sub.notes.append(f"{name}: a symbolic link; refused (submit the file itself)")
                        continue
                    with zf.open(info) as f:
                        data = f.read(MAX_MODULE_BYTES + 1)  # never trust file_size: read at most the cap
                    if len(data) > MAX_MODULE_BYTES:
                        sub.notes.append(f"{name}: over the {MAX_MODULE_BYTES} byte limit; refused")
                    else:
                        sub.modules[module] = data
        except (zipfile.BadZipFile, OSError, RuntimeError, NotImplementedError) as exc:
            raise SubmissionError(f"{path.name}: cannot read the zip ({exc})") from exc
    else:
        raise SubmissionError(f"{path}: neither a folder nor a zip file")
    return sub


# A mixed module: in a kit of some parts its kept parts' tasks are stubs and the rest is given (subset.py), so
# the student's copy is graded whenever the kit leaves a task of it to the student (a Part 3 kit gives it whole).
ALWAYS_GRADED = frozenset({"accounting"})
# The rubric entries with a task in accounting.py (§1.7, §5.6, Part 6, §7.4, §8.4, §9.4, §10.7, §11.4): a kit of
# any of them grades the student's accounting.py. Stated here, since a kit's grader has no reference to read it
# from; tests/staff/grader/test_subset.py checks it against the reference's task blocks (subset.kit_manifest).
ACCOUNTING_TASKS = frozenset({"collectives", "pipeline", "accounting", "mesh", "expert_parallel", "context_parallel",
                              "checkpoint", "fault_tolerance", "parallelize"})  # fmt: skip


def graded_modules(kit_parts: list[str]) -> frozenset[str]:
    """The part modules a kit grades from the submission: those its (whole, unselected) rubric names, and the
    mixed ``accounting`` when the kit leaves some of its tasks to the student (``ACCOUNTING_TASKS``). Every other
    module is given code (or a part the kit lacks): the staff's copy, whatever the submission holds."""
    return frozenset(kit_parts) | (ALWAYS_GRADED if set(kit_parts) & ACCOUNTING_TASKS else frozenset())


def keep_graded(sub: Submission, graded: frozenset[str]) -> Submission:
    """Drop the submission's copies of modules the kit gives (a student who edits given code is graded on the
    staff's copy), saying so in the output."""
    kept = {m: data for m, data in sub.modules.items() if m in graded}
    notes = list(sub.notes)
    for module in sorted(set(sub.modules) - set(kept)):
        notes.append(f"{module}.py is given code in this kit (it grades {', '.join(sorted(graded))}): "
                     "the staff's copy is used and the submission's copy is ignored")  # fmt: skip
    return Submission(kept, notes, graded)


@functools.lru_cache(maxsize=4)
def _kit_modules(parts: frozenset[int]) -> dict[str, bytes]:
    """``cs336_systems/<module>.py`` -> its text in the kit of ``parts``, exactly as the kit's cut ships it."""
    from scripts.grading import subset  # it reads the reference: only ever called on the staff checkout

    return {f"cs336_systems/{m}.py": text.encode() for m, text in subset.subset_stubs(parts).items()}


def _kit_parts(part_names) -> frozenset[int] | None:
    """The handout parts of a kit that a grade of the rubric entries ``part_names`` stands for, or None when the
    grade is of the whole kit or runs without the reference (the Gradescope zip: its ``cs336_systems`` is its kit's)."""
    from scripts.grading.subset import module_parts

    owner = module_parts()
    parts = frozenset(owner[n] for n in part_names if n in owner)
    if not parts or parts >= set(owner.values()) or not (REPO / "reference_solutions").is_dir():
        return None
    return parts


def kit_submission(sub: Submission, part_names) -> tuple[Submission, list[str]]:
    """What a grade of the rubric entries ``part_names`` takes from ``sub`` (see ``kit_of_run``), and notes for
    the student; the fingerprint of a grade is that of this submission (scripts/grading/fingerprint.py)."""
    from scripts.grading.subset import given_modules, module_parts

    parts = _kit_parts(part_names)
    if parts is None:
        return sub, []
    given = given_modules(parts)
    owner = module_parts()
    graded = graded_modules([m for m, n in owner.items() if n in parts])  # accounting when a task of it is theirs
    if sub.graded is not None:
        graded &= sub.graded
    kept = keep_graded(sub, graded)
    # Only the given modules a graded test runs are worth a line; other parts' modules are simply not graded.
    notes = [n for n in kept.notes if n not in sub.notes and n.split(".py", 1)[0] in given]
    return Submission(kept.modules, sub.notes, graded), notes


def kit_of_run(staff: StaffFiles, sub: Submission, part_names) -> tuple[StaffFiles, Submission, list[str]]:
    """The kit that a grade of the rubric entries ``part_names`` stands for: (its staff files, the submission with
    only that kit's modules, notes for the student).

    Graded from the staff checkout, whose ``cs336_systems`` holds only stubs, a grade of some parts
    (``--parts 11``) is the kit of those parts: every part module outside them is what the kit ships (the
    reference for the modules they build on, a stub for the others; ``accounting.py`` with the graded parts'
    tasks as stubs and the rest given), never the staff checkout's stub of a module the student was given;
    the submission's copies of modules outside them are ignored. The whole kit, and a grader without the
    reference (the Gradescope zip, whose ``cs336_systems`` is already its kit's), are left as they are."""
    parts = _kit_parts(part_names)
    if parts is None:
        return staff, sub, []
    kept, notes = kit_submission(sub, part_names)
    return StaffFiles({**staff.files, **_kit_modules(parts)}), kept, notes


@dataclass
class StaffFiles:
    """The staff files a sandbox needs, held in memory: what a submission does on disk cannot alter them."""

    files: dict[str, bytes]

    @classmethod
    def snapshot(cls, repo: Path) -> StaffFiles:
        files = {}
        for sub in ("tests", "cs336_systems"):
            for p in sorted((repo / sub).rglob("*")):
                rel = p.relative_to(repo).as_posix()
                if not p.is_file() or "__pycache__" in rel or not reaches_grading_machine(rel):
                    continue
                if p.suffix in (".py", ".md", ".toml", ".json", ".txt"):
                    files[rel] = p.read_bytes()
        for rel in ("pyproject.toml", *PLUGIN_FILES):
            files[rel] = (repo / rel).read_bytes()
        files["reference_solutions/__init__.py"] = REFERENCE_PLACEHOLDER.encode()
        return cls(files)

    def test_files(self) -> list[str]:
        return sorted(f for f in self.files if f.startswith("tests/") and Path(f).name.startswith("test_"))

    def without(self, prefix: str) -> StaffFiles:
        """The same files but those under ``prefix``: the public run's sandbox holds no hidden test, so
        nothing a submission does during it can read one."""
        return StaffFiles({rel: data for rel, data in self.files.items() if not rel.startswith(prefix)})

    def only_tests(self, prefix: str, files: list[str]) -> StaffFiles:
        """The same files but the test files under ``prefix`` that are not in ``files``: the hidden run's sandbox
        holds the hidden tests it grades and no other part's (a submission graded on ``--parts ddp`` finds no
        hidden test of another part to read)."""
        keep = set(files)
        return StaffFiles(
            {
                rel: data
                for rel, data in self.files.items()
                if not (rel.startswith(prefix) and Path(rel).name.startswith("test_")) or rel in keep
            }
        )


def build_sandbox(dest: Path, staff: StaffFiles, sub: Submission) -> list[str]:
    """(Re)create ``dest`` from memory. Returns notes on modules taken from the stubs."""
    if dest.exists():
        shutil.rmtree(dest)
    notes = []
    for rel, data in staff.files.items():
        module = rel.removeprefix("cs336_systems/").removesuffix(".py")
        if rel.startswith("cs336_systems/") and module in PART_MODULES:
            if module in sub.modules:
                data = sub.modules[module]
            elif sub.graded is None or module in sub.graded:
                notes.append(f"{module}.py is not in the submission: its tests run against the unchanged stub")
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    for module, data in sub.modules.items():  # a part module the staff tree has no file for yet
        target = dest / "cs336_systems" / f"{module}.py"
        if not target.exists():
            target.write_bytes(data)
    return notes
