"""Write the student release of the kit to OUT and check it (staff only; run from the repository root).

    python -m scripts.release.cut ../cs336-systems-release       # write and check
    python -m scripts.release.cut OUT --no-check                 # write only
    python -m scripts.release.cut OUT --parts 1,2,3              # a kit of parts 1-3 only (scripts/grading/subset.py)

The release is every file git knows here (tracked, or new and not ignored) except the staff-only ones,
listed once in scripts/grading/staff.py: ``reference_solutions/``, all of ``tests/staff/`` (hidden
tests, mutants, grader tests, the stub check), the grader (``scripts/grading/``), the release tools (this script,
the stub generator: ``scripts/release/``), ``scripts/main.sh``, ``.ci/`` and ``handouts/grading.md``.
Nothing below ``tests/staff/`` ships, listed there or not. ``pyproject.toml`` loses the reference package and
``submitit`` (its ``dev`` extra is ruff alone); staff-only text in a shipped file is cut: sections between
``<!-- staff -->`` and ``<!-- /staff -->`` in every markdown file, lines from ``# <staff>`` to ``# </staff>`` in
Python, TOML and shell files. Then the release is checked:
1. no staff file and no staff text: no line of the reference's code that the stubs do not share, no
   hidden test's name, no ``pytest.mark.staff``;
2. a fresh install works: a new virtual environment (reusing this one's dependencies, not this
   checkout) installs the release with pip;
3. ``pytest tests/`` there: tests marked ``harness`` pass, and every other test fails cleanly with the
   stubs' ``NotImplementedError`` naming its handout section (scripts/release/check_stubs.py's judge).
With ``--parts``, only those parts' stubs, tests, handouts, benchmarks and figures ship (other parts' modules
that they build on ship as given code: scripts/grading/subset.py, their docstrings as given code's, ``given_voice``),
and the check adds:
4. the kit's tests pass on the kit solved: its given code, and the reference for its own parts (a package
   outside the release, on the test run's path only).
Every release check also fails on what a student would trip on (``kit_problems``: a dead link, a named test,
script or module the release lacks, missing ground rules, build leftovers) and on any shipped text file that
names something of the staff's (``staff_names``: a staff-only path, module or file name, a hidden test's file,
the mutants); and the checks must leave the release as written (every file and folder compared before and
after: a ``--help`` that draws a figure, a cache a test run writes). ``--walk`` runs every command of the
README (its code blocks and the commands its text names) and of each handout's first code block in the
release's venv, as a newcomer, in a copy of the release.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from scripts.grading import subset
from scripts.grading.staff import STAFF_ONLY, STAFF_TESTS, is_staff_only, path_of
from scripts.release import api_reference, check_stubs

REPO = Path(__file__).resolve().parents[2]
STAFF_SECTION = re.compile(r"<!-- staff -->.*?<!-- /staff -->\n?", re.S)  # markdown: staff-only text
# Python (code or docstring), TOML, shell: the lines from "# <staff>" to "# </staff>", markers included.
STAFF_LINES = re.compile(r"^[ \t]*# <staff>.*?^[ \t]*# </staff>[^\n]*\n?", re.S | re.M)
_HASH_COMMENTS = {".py", ".toml", ".sh", ".cfg"}
KIT_MANIFEST = "kit.json"  # which modules the student writes and which are given (scripts/tools/submission.py)


def release_files(parts: frozenset[int] | None = None) -> list[str]:
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    # Every staff test lives below STAFF_TESTS, whether or not staff.py lists its file yet.
    return sorted(f for f in out.splitlines() if f and not is_staff_only(f) and not f.startswith(STAFF_TESTS)
                  and (REPO / f).is_file() and (parts is None or subset.keeps(f, parts)))  # fmt: skip


def write_release(out: Path, parts: frozenset[int] | None = None) -> list[str]:
    if out.exists():
        shutil.rmtree(out)
    files = release_files(parts)
    for rel in files:
        dest = out / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, dest)
        staff = STAFF_SECTION if dest.suffix == ".md" else STAFF_LINES if dest.suffix in _HASH_COMMENTS else None
        if staff is not None and staff.search(text := dest.read_text()):
            dest.write_text(staff.sub("", text))
    pyproject = out / "pyproject.toml"
    text = pyproject.read_text()
    text = re.sub(r"packages = \[[^\]]*\]", 'packages = ["cs336_systems"]', text)
    pyproject.write_text(re.sub(r',\s*"submitit[^"]*"', "", text))  # the staff's cluster runner: not a student's
    stubs = None
    if parts is not None:  # other parts' modules: given code where a kept part builds on them (subset.py)
        stubs = subset.subset_stubs(parts)
        given = subset.given_modules(parts) & set(stubs)
        owner = subset.module_parts()
        stubs = {m: given_voice(s, owner[m]) if m in given else s for m, s in stubs.items()}
        for module, source in stubs.items():
            (out / "cs336_systems" / f"{module}.py").write_text(source)
        kit = subset.kit_manifest(parts)  # the API reference of what the kit uses: written and given modules
        api = api_reference.render(stubs)
        for module in kit["unused"]:  # a module no kept part uses: its section (and its handout links) go
            api = re.sub(rf"^## `cs336_systems/{module}\.py`\n.*?(?=^## `|\Z)", "", api, flags=re.S | re.M)
        (out / api_reference.OUT.relative_to(REPO)).write_text(api)
        if 1 not in parts:  # every part's code follows §1.0: the kit carries it
            (out / subset.GROUND_RULES).write_text(subset.ground_rules())
    manifest = subset.kit_manifest(parts)
    (out / KIT_MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    present = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    readme = out / "README.md"
    if readme.exists():
        text = readme.read_text()
        if parts is not None:
            text = subset.kit_readme(subset.subset_readme(text, parts), parts, stubs, manifest)
        readme.write_text(subset.kit_markdown(text, present, where="", manifest=manifest))
    for doc in [*(out / "handouts").glob("*.md"), out / "tests" / "README.md"]:
        if doc.exists():
            where = doc.parent.relative_to(out).as_posix()
            doc.write_text(subset.kit_markdown(doc.read_text(), present, where, manifest=manifest))
    return files


_TO_AUTHOR = re.compile(r"\b(?:[Yy]ou|[Yy]our|Use|Reuse|Useful tools)\b")  # a sentence to whoever writes the code
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`(])")


def given_voice(source: str, part: int) -> str:
    """A given module (the reference, shipped because the kit's parts build on it) as given code, not as a task
    (issue 44): its docstring's sentences to the module's author ("Your task ...", "Use ...", "you may ...") go,
    a paragraph says whose code it is, "your" elsewhere reads "the" ("joins your forward" -> "the forward") and
    a task is the handout's section ("# ## Task 2.1: naive DDP" -> "# ## §2.1: naive DDP")."""
    source = re.sub(r"\(Part (\d+)'s handout \(not in this kit\)\)", r"(Part \1's handout, not in this kit)", source)
    head, quote, rest = source.partition('"""')
    doc, end, body = rest.partition('"""')
    paragraphs, given = [], f"Given code in this kit (Part {part} is not assigned): the staff's implementation"
    for para in doc.split("\n\n"):
        para = para.replace("Your task, in the order of the handout:", f"In the order of Part {part}'s handout:")
        para = re.sub(
            r"Your task \(Part \d+'s handout, not in this kit\):\s*(?:write |implement )?", f"{given} of ", para
        )
        if re.search(r"^ {4}", para, re.M) or not _TO_AUTHOR.search(para):  # a table or a list: kept as it is
            paragraphs.append(para)
            continue
        kept = [s for s in _SENTENCE_END.split(" ".join(para.split())) if not _TO_AUTHOR.search(s)]
        if kept:
            paragraphs.append(textwrap.fill(" ".join(kept), width=110))
    if not any(p.startswith("Given code in this kit") for p in paragraphs):
        paragraphs.insert(1, f"{given}, which the kit's parts build on.")
    body = re.sub(r"\bYour\b", "The", re.sub(r"\byour\b", "the", body))
    # "# ## Task 2.1: naive DDP", "(Task 7.1)": the handout's sections, not the reader's tasks.
    return re.sub(r"\bTask (\d+\.\d+)", r"§\1", head + quote + "\n\n".join(paragraphs) + end + body)


# Paths a student document may name: tests, scripts, handouts (`tests/test_x.py`, `python -m scripts.bench.x`).
_NAMED_PATH = re.compile(r"(?<![\w/.])((?:tests|scripts|handouts|cs336_systems)/[\w/.-]+\.(?:py|md))")
_NAMED_MODULE = re.compile(r"python -m (scripts(?:\.\w+)+)")
_LINK = re.compile(r"(?<!!)\[[^\]]+\]\(([^)\s]+)\)")


def kit_problems(out: Path) -> list[str]:
    """What a student of this release would trip on: a link to a file it lacks (every markdown file), a test,
    script or module that the README or a handout names and the release lacks, a staff-only name there, §1.0's
    ground rules missing, build leftovers."""
    problems = []
    present = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    for doc in sorted(out.rglob("*.md")):
        rel = doc.relative_to(out)
        text = doc.read_text()
        for target in _LINK.findall(text):
            if re.match(r"[a-z]+:|#", target):
                continue
            path = os.path.normpath(rel.parent / target.split("#", 1)[0]).replace(os.sep, "/")
            if path not in present and not (out / path).is_dir():
                problems.append(f"{rel}: links {target}, which the release lacks")
        if rel.as_posix() != "README.md" and rel.parts[0] != "handouts":
            continue
        for name in sorted(set(_NAMED_PATH.findall(text))):
            if name not in present and "<" not in name:
                problems.append(f"{rel}: names {name}, which the release lacks")
        for module in sorted(set(_NAMED_MODULE.findall(text))):
            where = module.replace(".", "/")
            if not ({f"{where}.py", f"{where}/__main__.py"} & present):
                problems.append(f"{rel}: runs `python -m {module}`, which the release lacks")
    problems += staff_problems(out)
    manifest = json.loads((out / KIT_MANIFEST).read_text()) if (out / KIT_MANIFEST).exists() else {}
    if 1 not in manifest.get("parts", [1]) and subset.GROUND_RULES not in present:
        problems.append(f"no {subset.GROUND_RULES}: a kit without Part 1 must carry §1.0's ground rules")
    problems += [f"{p}: a build leftover in the release" for p in leftovers(out)]
    return problems


_TEXT = {".py", ".md", ".toml", ".txt", ".cfg", ".ini", ".sh", ".json", ".yaml", ".yml"}


def staff_names() -> re.Pattern:
    """What no shipped file may name, from what the release leaves out (scripts/grading/staff.py): each
    staff-only path as a path (``tests/staff/``), as a module (``scripts.grading``) and by its file name
    (``grading.md``), a hidden test's file (``test_ddp_hidden``), and the mutants (the staff's planted bugs)."""
    names = set()
    for path in [e.path for e in STAFF_ONLY] + [STAFF_TESTS]:
        path = path.removesuffix("/__init__.py").rstrip("/")
        names.add(path)
        if path.split("/")[0] in ("scripts", "tests", "reference_solutions") and not path.endswith((".md", ".sh")):
            names.add(path.removesuffix(".py").replace("/", "."))  # python -m scripts.grading, tests.staff.x
        if "." in path.rsplit("/", 1)[-1]:
            names.add(path.rsplit("/", 1)[-1])  # a file: its bare name too
    names = {n for n in names if not any(n.startswith((f"{m}/", f"{m}.")) for m in names)}  # below a named folder
    names |= {p.stem for p in (REPO / path_of("hidden")).glob("test_*.py")}  # test_ddp_hidden
    words = [re.escape(n) for n in sorted(names, key=len, reverse=True)] + [r"mutants?"]
    return re.compile(rf"(?<![\w.-])(?:{'|'.join(words)})(?![\w-])", re.I)


# Files of other owners that still name staff-only things in every release (issue 43), each waiting for the edit
# asked of its owner: their mentions of these names are printed as a note, not a problem. Delete an entry with the
# edit that fixes its file (the note names entries that match nothing; tests/staff/test_kit_links.py fails on them).
PENDING: dict[str, tuple[str, ...]] = {}


def staff_mentions(out: Path) -> list[tuple[str, int, str, str]]:
    """(file, line number, name, line) for each name of ``staff_names`` in a text file of the release. Staff-only
    text in a shipped file goes between ``<!-- staff -->`` and ``<!-- /staff -->`` (markdown) or ``# <staff>`` and
    ``# </staff>`` lines (Python, TOML, shell): write_release cuts it."""
    pattern, found = staff_names(), []
    for path in sorted(p for p in out.rglob("*") if p.is_file() and p.suffix in _TEXT):
        rel = path.relative_to(out).as_posix()
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            found += [(rel, n, name, line.strip()) for name in dict.fromkeys(m[0] for m in pattern.finditer(line))]
    return found


def stale_pending(out: Path, pending: dict[str, tuple[str, ...]] | None = None) -> list[str]:
    """The entries of ``pending`` (default PENDING) whose file in the release no longer names their name."""
    named = {(rel, name) for rel, _, name, _ in staff_mentions(out)}
    return [f"{rel}: {name!r}" for rel, names in (PENDING if pending is None else pending).items()
            for name in names if (out / rel).exists() and (rel, name) not in named]  # fmt: skip


def staff_problems(out: Path, pending: dict[str, tuple[str, ...]] | None = None) -> list[str]:
    """A problem for each staff mention in the release, except those ``pending`` (default PENDING) excuses."""
    pending = PENDING if pending is None else pending
    found = staff_mentions(out)
    waiting = sorted({rel for rel, _, name, _ in found if name in pending.get(rel, ())})
    if waiting:
        print(f"note: {len(waiting)} file(s) still name staff-only things, awaiting their owners' edits (cut.py's "
              f"PENDING): {', '.join(waiting)}")  # fmt: skip
    stale = stale_pending(out, pending)
    if stale:
        print(f"note: PENDING entries that match nothing (delete them): {'; '.join(stale)}")
    return [f"{rel}:{n}: names the staff-only {name!r}: {line[:120]}"
            for rel, n, name, line in found if name not in pending.get(rel, ())]  # fmt: skip


def leftovers(out: Path) -> list[str]:
    """What building or installing the release leaves in it (a pip install of the folder writes build/ and
    *.egg-info/ there)."""
    found = [p for p in (out / "build", *out.glob("*.egg-info"), *out.glob("*/*.egg-info")) if p.exists()]
    return sorted(p.relative_to(out).as_posix() for p in found)


def tree_state(out: Path) -> dict[str, tuple[int, int] | None]:
    """Every path in ``out``: a file's (size, modification time in ns), a folder's None."""
    return {p.relative_to(out).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns) if p.is_file() else None
            for p in out.rglob("*")}  # fmt: skip


def changed_by_checks(before: dict, after: dict) -> list[str]:
    """What the release's checks added, changed or removed in it: a student's copy is what write_release wrote."""
    changes = [f"{p}: {'added' if p not in before else 'removed' if p not in after else 'changed'} by the checks"
               for p in sorted(before.keys() | after.keys()) if before.get(p, 0) != after.get(p, 0)]  # fmt: skip
    return changes


def remove_leftovers(out: Path) -> None:
    for rel in leftovers(out):
        shutil.rmtree(out / rel, ignore_errors=True)


def staff_text(out: Path | None = None) -> tuple[list[str], list[str]]:
    """Lines that only staff files contain: the reference's own code (less what the release's own modules ship,
    given code included) and the hidden tests' names."""
    stubs = (out or REPO) / "cs336_systems"
    shared = {ln.strip() for p in stubs.glob("*.py") for ln in p.read_text().splitlines()}
    ref = {ln.strip() for p in (REPO / "reference_solutions").glob("*.py") for ln in p.read_text().splitlines()}
    skip = ("#", '"""', "from ", "import ")
    lines = sorted(ln for ln in ref - shared if len(ln) >= 40 and not ln.startswith(skip))
    hidden = [m.group(1) for p in (REPO / path_of("hidden")).glob("*.py")
              for m in re.finditer(r"^def (test_\w+)", p.read_text(), re.M)]  # fmt: skip
    return lines, hidden + ["pytest.mark.staff"]


def check_no_staff_text(out: Path) -> list[str]:
    code_lines, names = staff_text(out)
    problems = [f"{e.path} is staff-only" for e in STAFF_ONLY if (out / e.path).exists()]
    if (out / STAFF_TESTS).exists():
        problems.append(f"{STAFF_TESTS} is staff-only")
    for p in out.rglob("*"):
        if p.is_file() and p.suffix in (".py", ".md", ".toml", ".txt", ".cfg", ".sh"):
            text = p.read_text(errors="replace")
            problems += [f"{p.relative_to(out)}: contains staff text {n!r}" for n in names if n in text]
            # One shared line can be a coincidence (a common idiom); three are pasted reference code.
            leaked = [ln for ln in code_lines if ln in text]
            if len(leaked) >= 3:
                problems.append(
                    f"{p.relative_to(out)}: contains {len(leaked)} lines of reference code, e.g. {leaked[:3]}"
                )
    return problems


def fresh_env(out: Path, tmp: Path) -> Path:
    """A new venv that sees this environment's dependencies but not this checkout, with the release installed."""
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    # A plain path line: the dependencies are importable, but this checkout's editable-install hook
    # (a .pth file in that folder) is not run, so only the release's cs336_systems can be found.
    Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", str(out)],
                   check=True, cwd=tmp)  # fmt: skip
    remove_leftovers(out)  # the install builds in the release folder: a student's copy starts clean
    return python


def run_reference_tests(python: Path, out: Path, tmp: Path, parts: frozenset[int], world_sizes: str = "1,2"):
    """A subset kit, solved, passes its tests: the kit's own modules (its given code included) with the kept
    parts' modules replaced by the reference, as a package outside the kit, on the test run's path only."""
    solved = tmp / "solved" / "cs336_solved"
    shutil.copytree(out / "cs336_systems", solved, ignore=shutil.ignore_patterns("__pycache__"))
    owner = subset.module_parts()
    for module in [m for m, n in owner.items() if n in parts] + ["accounting"]:
        shutil.copy2(REPO / "reference_solutions" / f"{module}.py", solved / f"{module}.py")
    env = {**os.environ, "PYTHONPATH": str(solved.parent)}
    cmd = [str(python), "-m", "pytest", "tests/", "-q", "-x", "-p", "no:cacheprovider", "--impl", "cs336_solved",
           f"--world-sizes={world_sizes}"]  # fmt: skip
    print("release: the kit's tests against the kit solved (its given code, the reference for its parts)")
    run = subprocess.run(cmd, cwd=out, capture_output=True, text=True, env=env)
    return [] if run.returncode == 0 else [f"the kit's tests fail on the solved kit:\n{run.stdout[-3000:]}"]


def run_release_tests(python: Path, out: Path, world_sizes: str = "1,2", harness: bool = True) -> list[str]:
    problems = []
    if not harness:  # --quick: the harness is the same in every kit, and the full release's check runs its tests
        print("release: the student tests against the stubs, as scripts/release/check_stubs.py judges them")
        return check_stubs.run(out, "student", extra=["--world-sizes", world_sizes], python=python)
    cmd = [str(python), "-m", "pytest", "tests/", "-q", "-p", "no:cacheprovider", "-m", "harness",
           f"--world-sizes={world_sizes}"]  # fmt: skip
    harness = subprocess.run(cmd, cwd=out, capture_output=True, text=True)
    if harness.returncode not in (0, 5):
        problems.append(f"harness tests fail in the release:\n{harness.stdout[-3000:]}")
    print("release: the student tests against the stubs, as scripts/release/check_stubs.py judges them")
    return problems + check_stubs.run(out, "student", extra=["--world-sizes", world_sizes], python=python)


def run_release_scripts(python: Path, out: Path) -> list[str]:
    """Every script a student may run works in the release's own venv: --help, the planner, the submission zip."""
    problems = []

    def run(args: list[str], what: str, ok_if_unimplemented: bool = False) -> None:
        try:
            r = subprocess.run([str(python), *args], cwd=out, capture_output=True, text=True, timeout=300)
        except subprocess.TimeoutExpired:
            problems.append(f"{what}: took over 300 s in the release")
            return
        # A stub that raises NotImplementedError is what the release ships; anything else (a missing
        # reference_solutions, an import error) is a release that does not work as shipped.
        if r.returncode != 0 and not (ok_if_unimplemented and "NotImplementedError" in r.stderr):
            problems.append(f"{what} fails in the release (exit {r.returncode}):\n{(r.stdout + r.stderr)[-2000:]}")

    # Every shipped command, run as the README and the handouts do: python -m scripts.<package>.<module>.
    modules = sorted(
        ".".join(p.relative_to(out).with_suffix("").parts).removesuffix(".__main__")
        for p in (out / "scripts").rglob("*.py")
        if 'if __name__ == "__main__"' in p.read_text()
    )
    print(f"release: --help of {len(modules)} scripts, the memory planner, the submission zip")
    # Each --help is a fresh interpreter importing torch (~2 s of start-up): two at a time halve the wall time.
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(lambda module: run(["-m", module, "--help"], f"python -m {module} --help"), modules))
    run(["-m", "scripts.tools.memory", "--params", "7.5e9", "--gpus", "64", "--gpu-memory", "32"],
        "python -m scripts.tools.memory (the README's example)", ok_if_unimplemented=True)  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        zip_path = str(Path(tmp) / "submission.zip")
        run(["-m", "scripts.tools.submission", "--out", zip_path], "python -m scripts.tools.submission")
    return problems


def walk_commands(out: Path) -> list[tuple[str, str]]:
    """(document, command) for every command a newcomer types from the README (its code blocks, and the commands
    its text names in full, like `python -m scripts.figures`) and the first code block of each handout in ``out``
    (pytest and python lines; setup and activation are the venv's job here)."""
    found = []
    for doc in [out / "README.md", *sorted((out / "handouts").glob("[0-9][0-9]-*.md"))]:
        text = doc.read_text()
        blocks = re.findall(r"```(?:bash)?\n(.*?)```", text, re.S)
        if doc.name == "README.md":  # a command in the text, whole (no <placeholder>, DIR or file of one's own)
            named = re.findall(r"`((?:python -m|pytest) [^`<]*)`", text)
            blocks += [c for c in named if not re.search(r"\bDIR\b|scratch/", c)]
        if doc.name != "README.md":  # a handout's commands: the code before its first section, fenced or indented
            intro = text.split("\n## ", 1)[0]
            blocks = re.findall(r"```(?:bash)?\n(.*?)```", intro, re.S) + re.findall(r"(?m)^    (\S.*)$", intro)
        for block in blocks:
            for line in block.splitlines():
                cmd = line.split("  #")[0].strip()
                if cmd.startswith(("pytest", "python ")) and (doc.name, cmd) not in found:
                    found.append((doc.relative_to(out).as_posix(), cmd))
    return found


def newcomer_walk(python: Path, out: Path, timeout: float = 900) -> list[str]:
    """Run every command of ``walk_commands`` in the release, with its own venv, as a student would: each must
    run (exit 0) or stop at a stub's NotImplementedError; a missing file, module or option fails the walk."""
    problems = []
    with tempfile.TemporaryDirectory(prefix="cs336-walk-") as trace:
        clone = Path(trace) / "kit"  # the newcomer's own copy: what the commands write stays out of the release
        shutil.copytree(out, clone)
        for doc, cmd in walk_commands(out):
            run = re.sub(r"^pytest\b", f"{python} -m pytest", cmd)
            run = re.sub(r"^python\b", str(python), run).replace("/tmp/trace", trace)
            if "<one of its files>" in run:
                files = sorted(Path(trace).glob("*.json"))
                run = run.replace(f"{trace}/<one of its files>.json", str(files[0]) if files else "missing.json")
            if re.search(r" -m pytest tests/\s*$", run):
                run += " -x -q"  # the whole suite on the stubs: the first failure is enough
            try:
                r = subprocess.run(run, shell=True, cwd=clone, capture_output=True, text=True, timeout=timeout)
            except subprocess.TimeoutExpired:
                problems.append(f"{doc}: `{cmd}` took over {timeout:.0f} s")
                continue
            text = r.stdout + r.stderr
            stub = "NotImplementedError" in text or "is not implemented yet" in text  # a benchmark's own words
            ok = r.returncode == 0 or (r.returncode == 1 and stub)
            print(f"release walk: {doc}: {cmd}: " + ("ok" if r.returncode == 0 else "stops at a stub" if ok else
                                                     f"FAILS (exit {r.returncode})"))  # fmt: skip
            if not ok:
                problems.append(f"{doc}: `{cmd}` fails in the release (exit {r.returncode}):\n{text[-1500:]}")
    return problems


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path, help="folder to write the release to (replaced if it exists)")
    p.add_argument("--no-check", action="store_true", help="write the release without checking it")
    p.add_argument("--parts", help="only these parts, e.g. 1,2,3 (see scripts/grading/subset.py)")
    p.add_argument("--quick", action="store_true", help="CI's subset check: world size 2 only, the scripts' --help "
                   "left to the full release's check")  # fmt: skip
    p.add_argument("--walk", action="store_true", help="also run every command of the README and the handouts' "
                   "first code blocks, as a newcomer would (minutes)")  # fmt: skip
    args = p.parse_args()
    out = args.out.resolve()
    if REPO in [out, *out.parents]:
        p.error("OUT must be outside this checkout")
    parts = subset.parse_parts(args.parts)
    files = write_release(out, parts)
    print(f"wrote {len(files)} files to {out}" + (f" (parts {args.parts})" if parts else ""))
    kit = json.loads((out / KIT_MANIFEST).read_text())
    if kit["given"]:
        print(f"given code (the reference, solutions included): {', '.join(kit['given'])}")
    mixed = kit.get("mixed", {}).get("accounting", {})
    if mixed.get("given") and mixed.get("write"):
        print(f"note: accounting.py ships the reference of parts {', '.join(map(str, mixed['given']))}'s tasks; a "
              "later assignment of the same term that asks for them must not reuse this kit's copy")  # fmt: skip
    if args.no_check:
        return 0
    problems = check_no_staff_text(out) + kit_problems(out)
    before = tree_state(out)
    # The checks run the release's code in it (pytest, every --help): no bytecode caches, and hypothesis's example
    # database (.hypothesis/ in the working folder) in the temporary folder.
    os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
    with tempfile.TemporaryDirectory(prefix="cs336-release-") as tmp:
        os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = str(Path(tmp) / "hypothesis")
        python = fresh_env(out, Path(tmp))
        sizes = "2" if args.quick else "1,2"
        problems += run_release_tests(python, out, sizes, harness=not args.quick)
        if parts is not None:
            problems += run_reference_tests(python, out, Path(tmp), parts, sizes)
        if not args.quick:
            problems += run_release_scripts(python, out)
        if args.walk:
            problems += newcomer_walk(python, out)
    problems += changed_by_checks(before, tree_state(out))
    for problem in problems:
        print("PROBLEM:", problem)
    print("release OK" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
