"""Zip what you hand in (the part modules of cs336_systems) and check that each one imports.

    python -m scripts.tools.submission                  # writes submission.zip in the current folder
    python -m scripts.tools.submission --out my.zip

Upload the zip itself: Gradescope unpacks it. (A zip inside a folder or another zip is still found and graded
when it is the only one that holds part modules, with a note.)

Only the part modules are graded: ``cs336_systems/<module>.py`` for each module in ``PART_MODULES``
below (collectives, ddp, ..., one per idea of the handouts). The grader uses its own copies of the given
modules (``GIVEN_MODULES``: __init__.py, models.py, utils.py, launcher.py, transformer.py,
platform_support.py) and of the tests, so changes you make to them are not graded. Each module is imported
in a fresh process (your code at import time must not print, exit or take long); functions that still raise
NotImplementedError are listed so you know what is left.

A kit of some parts says in ``kit.json`` (beside README.md) which part modules you write; the others are
given (the staff's code, which your parts build on) or unused, and are neither zipped nor graded.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# The graded modules, in part order (the autograder reads this very list).
PART_MODULES = ("collectives", "ddp", "sharded_optimizer", "fsdp", "tensor_parallel", "pipeline", "accounting",
                "mesh", "expert_parallel", "context_parallel", "checkpoint", "fault_tolerance",
                "parallelize")  # fmt: skip
# The given modules of cs336_systems: shipped to students, never graded (the grader always uses its copies).
GIVEN_MODULES = ("__init__", "models", "utils", "launcher", "transformer", "platform_support")
MAX_MODULE_BYTES = 2 << 20  # a part module is a few hundred lines; the grader refuses larger ones


def unfinished(path: Path) -> list[str]:
    """Functions whose body still raises NotImplementedError."""
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for stmt in node.body:
                exc = getattr(stmt, "exc", None)
                target = exc.func if isinstance(exc, ast.Call) else exc
                if isinstance(stmt, ast.Raise) and getattr(target, "id", None) == "NotImplementedError":
                    names.append(node.name)
    return names


KIT = REPO / "kit.json"  # written by the release cut: which part modules this kit's student writes


def modules_of_kit() -> tuple[list[str], list[str], list[str]]:
    """(written, given, unused) part modules: from kit.json in a kit; every part module in the full release."""
    if KIT.exists():
        kit = json.loads(KIT.read_text())
        return list(kit["written"]), list(kit["given"]), list(kit.get("unused", []))
    return [m for m in PART_MODULES if (REPO / "cs336_systems" / f"{m}.py").exists()], [], []


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("submission.zip"), help="zip to write (default submission.zip)")
    args = p.parse_args()
    problems = []
    written, given, unused = modules_of_kit()
    helpers = ", ".join(f"{m}.py" for m in GIVEN_MODULES)
    print(f"you write: {', '.join(f'{m}.py' for m in written)}")
    print(f"given, not graded (the grader uses its own copies): {', '.join([*(f'{m}.py' for m in given), helpers])}")
    if unused:
        print(f"not in this kit (stubs no part uses, not graded): {', '.join(f'{m}.py' for m in unused)}")
    with zipfile.ZipFile(args.out, "w", zipfile.ZIP_DEFLATED) as zf:
        for module in written:
            path = REPO / "cs336_systems" / f"{module}.py"
            if not path.is_file() or path.is_symlink():
                problems.append(f"{path}: missing or a symbolic link (not submitted)")
                continue
            if path.stat().st_size > MAX_MODULE_BYTES:
                problems.append(f"{path}: larger than {MAX_MODULE_BYTES} bytes; the grader would refuse it")
                continue
            check = subprocess.run([sys.executable, "-c", f"import cs336_systems.{module}"], cwd=REPO,
                                   capture_output=True, text=True, timeout=120)  # fmt: skip
            if check.returncode != 0 or check.stdout.strip():
                why = (check.stderr.strip().splitlines() or ["it printed at import time"])[-1]
                problems.append(f"cs336_systems/{module}.py does not import cleanly: {why}")
            todo = unfinished(path)
            status = f"{len(todo)} function(s) still raise NotImplementedError" if todo else "complete"
            print(f"  {module + '.py':24s} {status}{': ' + ', '.join(todo) if todo else ''}")
            zf.write(path, f"cs336_systems/{module}.py")
    for problem in problems:
        print("PROBLEM:", problem)
    print(f"wrote {args.out}" + (" (with problems: fix them before you hand it in)" if problems else
          ": upload this zip itself to Gradescope (it unpacks it), not a folder or another zip around it"))  # fmt: skip
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
