"""Generate the student stubs and the API reference from the staff reference: one source per part module.

    python -m scripts.release.stubs            # rewrite cs336_systems/<part>.py and handouts/api.md
    python -m scripts.release.stubs --check    # CI: fail, naming the file, if a generated file is stale

``reference_solutions/<part>.py`` is the only file a maintainer edits. Its module docstring, signatures,
docstrings, section banners (``# ## Task 3.3: ...``) and given code are copied to the stub as they are;
solution code sits between two marker comments, at the indentation of the code they enclose:

    # BEGIN SOLUTION                        the lines up to END are left out of the stub
    ...                                     (private helpers, constants, a private method)
    # END SOLUTION

    # BEGIN SOLUTION: Task 3.3 (FSDP)       the lines up to END become, in the stub,
    ...                                     raise NotImplementedError("Task 3.3 (FSDP): see handouts/03-zero.md §3.3")
    # END SOLUTION                          (a function body, or one branch of it)

Then, in the stub only: ``reference_solutions`` reads ``cs336_systems``, imports that nothing uses any
more are dropped (keep one for students with ``# noqa: F401``), and ruff sorts and formats the result.
The stubs stay committed (students need them); ``--check`` keeps them and ``handouts/api.md`` current.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

from scripts.release import api_reference
from scripts.tools.submission import PART_MODULES

ROOT = Path(__file__).resolve().parents[2]
REFERENCE, STUBS = ROOT / "reference_solutions", ROOT / "cs336_systems"

_BEGIN = re.compile(r"^(?P<indent>[ \t]*)# BEGIN SOLUTION(?::\s*(?P<task>Task (?P<part>\d+)\.(?P<sub>\d+)\b.*?))?\s*$")
_END = re.compile(r"^[ \t]*# END SOLUTION\s*$")


class MarkerError(ValueError):
    """A reference module whose markers do not pair up or name no handout section."""


def handout_of(part: int) -> str:
    """``handouts/03-zero.md`` for part 3: the one handout whose name starts with the part's number."""
    found = sorted((ROOT / "handouts").glob(f"{part:02d}-*.md"))
    if len(found) != 1:
        raise MarkerError(f"part {part}: expected one handouts/{part:02d}-*.md, found {[p.name for p in found]}")
    return f"handouts/{found[0].name}"


def strip_solutions(source: str, name: str) -> str:
    """``source`` with every marked block removed, or replaced by the ``raise`` its marker names."""
    out: list[str] = []
    block: re.Match | None = None  # the BEGIN marker of the block we are in
    begin_line = 0
    for number, line in enumerate(source.splitlines(keepends=True), start=1):
        if block is None:
            block, begin_line = _BEGIN.match(line), number
            if block is None:
                if _END.match(line):
                    raise MarkerError(f"{name}:{number}: END SOLUTION without a BEGIN")
                out.append(line)
            continue
        if _BEGIN.match(line):
            raise MarkerError(f"{name}:{number}: BEGIN SOLUTION inside the block opened at line {begin_line}")
        if _END.match(line):
            if block["task"]:
                message = f"{block['task']}: see {handout_of(int(block['part']))} §{block['part']}.{block['sub']}"
                out.append(f'{block["indent"]}raise NotImplementedError("{message}")\n')
            block = None
    if block is not None:
        raise MarkerError(f"{name}:{begin_line}: BEGIN SOLUTION is never closed")
    return "".join(out)


def _ruff(args: list[str], text: str, filename: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "ruff", *args, "--stdin-filename", filename, "-"], input=text,
                          capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    if proc.returncode != 0:
        raise MarkerError(f"ruff {args[0]} failed on the generated {filename}:\n{proc.stderr}{proc.stdout}")
    return proc.stdout


def stub_source(module: str) -> str:
    """The student's ``cs336_systems/<module>.py``, generated from ``reference_solutions/<module>.py``."""
    text = strip_solutions((REFERENCE / f"{module}.py").read_text(), f"reference_solutions/{module}.py")
    text = text.replace("reference_solutions", "cs336_systems")
    filename = f"cs336_systems/{module}.py"
    text = _ruff(["check", "--fix-only", "--exit-zero", "--select", "F401,I"], text, filename)
    return _ruff(["format"], text, filename)


def generated() -> dict[Path, str]:
    """Every generated file and its text: each part's stub, then handouts/api.md from those stubs."""
    stubs = {module: stub_source(module) for module in PART_MODULES}
    files = {STUBS / f"{module}.py": text for module, text in stubs.items()}
    files[api_reference.OUT] = api_reference.render(stubs)
    return files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="fail if a generated file differs from what is committed")
    args = parser.parse_args()
    try:
        files = generated()
    except MarkerError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    stale = [path for path, text in files.items() if not path.exists() or path.read_text() != text]
    if args.check:
        for path in stale:
            print(f"{path.relative_to(ROOT)} is stale: edit reference_solutions/, then run "
                  "python -m scripts.release.stubs", file=sys.stderr)  # fmt: skip
        if not stale:
            print(f"{len(files)} generated files are current (stubs and handouts/api.md)")
        return 1 if stale else 0
    for path in stale:
        path.write_text(files[path])
        print(f"wrote {path.relative_to(ROOT)}")
    print(f"{len(files) - len(stale)} of {len(files)} generated files were already current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
