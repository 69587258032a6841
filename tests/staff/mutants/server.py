"""One long-lived pytest process that runs slices of the suite on request (staff only).

A mutant's check is ``pytest <slice> --impl <mutant>``; in a fresh process each costs ~6 s (importing
torch and pytest, then starting the worker pools, whose ranks import torch again) for a run of a
fraction of a second. This server runs every request with ``pytest.main`` in one process and keeps
the worker pools between requests: the ranks load the implementation named by each task
(tests/harness/context.py), so one pool serves every mutant. Each request still gets a fresh default
process group on every rank, so nothing one mutant left in flight reaches the next, and the test
modules are imported afresh, so no result one of them cached (``functools.cache``) is reused.

Protocol, one JSON line each way on stdin/stdout: ``{"args": [...]}`` -> ``{"returncode": int,
"output": str}``. End of stdin ends the server (and, with it, its ranks). The client is
``tests.staff.mutants.runner.run_suite``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

KEPT = ("tests.harness", "tests.staff.mutants")  # the pools live in tests.harness.pool


def _run_pytest(args: list[str]) -> tuple[int, str]:
    """``pytest.main(args)`` with everything it prints (fd 1 and 2) collected in a temporary file."""
    import pytest

    from tests.harness import pool

    for p in pool._POOLS.values():  # whatever the last request left in flight stays in its old group
        p.fresh_group = True
    for name in [m for m in sys.modules if m.startswith("tests.") and not m.startswith(KEPT)]:
        del sys.modules[name]  # test modules are imported afresh: no cached result of the last mutant
    environ = dict(os.environ)  # tests/conftest.py exports each option (CS336_*) for the ranks and reads its
    # defaults from there: a request's --device-faithful or --p2p-matching must not become the next one's default
    with tempfile.TemporaryFile(mode="w+b") as out:
        saved = os.dup(1), os.dup(2)
        sys.stdout.flush(), sys.stderr.flush()
        os.dup2(out.fileno(), 1), os.dup2(out.fileno(), 2)
        try:
            code = int(pytest.main(args))
        finally:
            sys.stdout.flush(), sys.stderr.flush()
            os.dup2(saved[0], 1), os.dup2(saved[1], 2)
            os.close(saved[0]), os.close(saved[1])
            os.environ.clear()
            os.environ.update(environ)
        out.seek(0)
        return code, out.read().decode(errors="replace")


def main() -> None:
    from tests.harness import pool

    pool.KEEP_POOLS = True  # tests/conftest.py leaves them running at the end of each pytest.main
    # Replies go out on a private copy of stdout: fd 1 itself is pytest's while a request runs.
    channel = os.fdopen(os.dup(1), "w")
    for line in sys.stdin:
        code, output = _run_pytest(json.loads(line)["args"])
        channel.write(json.dumps({"returncode": code, "output": output}) + "\n")
        channel.flush()
    pool.shutdown_pools()


if __name__ == "__main__":
    main()
