"""Build the Gradescope autograder zip: setup.sh, run_autograder and the kit, all at its root.

    python -m scripts.grading.make_autograder_zip              # writes out/autograder.zip

Gradescope unpacks the zip into /autograder/source (and copies run_autograder to /autograder), so the
kit sits at the zip's root, where run_autograder expects it. The zip holds what grading needs (the
tests with the hidden ones, the harness, the stubs and given helpers, the grader and its rubric) and
nothing staff.py keeps off the grading machine: no copy of the reference exists there for a
submission to find. Upload it under "Configure Autograder" (see handouts/grading.md).
"""

from __future__ import annotations

import argparse
import subprocess
import zipfile
from pathlib import Path

from scripts.grading.staff import reaches_grading_machine

REPO = Path(__file__).resolve().parents[2]
KEEP = ("pyproject.toml", "cs336_systems/", "tests/", "scripts/")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=REPO / "out" / "autograder.zip")
    args = p.parse_args()
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(args.out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in ("setup.sh", "run_autograder"):
            info = zipfile.ZipInfo(name)
            info.external_attr = 0o755 << 16
            zf.writestr(info, (REPO / "scripts/grading/gradescope" / name).read_bytes())
        kept = [f for f in files if f.startswith(KEEP) and reaches_grading_machine(f) and (REPO / f).is_file()]
        for f in kept:
            zf.write(REPO / f, f)  # Gradescope unzips into /autograder/source: the kit must be at the top
    print(f"wrote {args.out} ({len(kept)} source files)")


if __name__ == "__main__":
    main()
