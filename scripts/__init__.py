"""The kit's tools, one package per job. Run each as a module from the repository root:

    python -m scripts.bench.ddp              # bench/     a benchmark per part (common.py: launcher, timer, tables)
    python -m scripts.figures                # figures/   redraw every handout figure into handouts/figures/
    python -m scripts.tools.memory --help    # tools/     student tools: trace viewer, planners, submission zip
    python -m scripts.release.cut OUT        # release/   the student release, its stub check, the API reference
    python -m scripts.grading SUB --out r.json   # grading/   the autograder (staff only)

Imports are absolute (``scripts.bench.common``, ``tests.harness.defaults``) and no file edits ``sys.path``.
``setup.sh`` and ``main.sh`` stay here: they are the README's two commands.
"""
