"""The autograder (staff only): ``python -m scripts.grading`` is its command line, handouts/grading.md its guide.

    __main__.py   the command line: grade one submission, or a folder of them (--batch)
    staff.py      what is staff-only, and what may reach the grading machine (one table)
    sandbox.py    reads a submission's part modules and builds the private sandbox pytest runs in
    runner.py     runs pytest there, reads the signed channel, survives crashes, hangs and kills
    plugin.py     the pytest plugin inside the sandbox that reports each test over that channel
    channel.py    the channel's wire format (JSON + HMAC), shared by plugin.py and runner.py
    rubric.py     rubric.toml's points and visibility, and the scoring of test cases
    fingerprint.py   the one fingerprint of the code a grade took from a submission (results, merge, pack, cluster)
    progress.py   a grade's progress on stderr: one line per part as its tests finish
    summary.py    the batch's dashboard and CSV, from the results alone (also after a regrade's merge)
    make_autograder_zip.py   the Gradescope upload (gradescope/ holds its setup.sh and run_autograder)

Run everything from the repository root as modules (``python -m scripts.grading ...``): imports are
absolute (``scripts.grading.x``, ``tests.harness.x``) and no file edits ``sys.path``.
"""
