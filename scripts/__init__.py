"""The kit's tools, one package per job. Run each as a module from the repository root:

    python -m scripts.bench.<module> --help  # bench/     a benchmark per part (common.py: launcher, timer, tables)
    python -m scripts.figures                # figures/   redraw the handouts' figures into handouts/figures/
    python -m scripts.tools.memory --help    # tools/     student tools: trace viewer, planners, submission zip
# <staff> (the student release has neither the staff's tools nor these lines: scripts/release/cut.py)
    python -m scripts.release.cut OUT        # release/   the student release, its stub check, the API reference
    python -m scripts.grading SUB --out r.json   # grading/   the autograder (staff only)
# </staff>

Imports are absolute (``scripts.bench.common``, ``tests.harness.defaults``) and no file edits ``sys.path``.
``setup.sh`` stays here: it is the README's install command.
# <staff>
``main.sh`` too: CI's main job, the reference graded by the autograder.
# </staff>
"""
