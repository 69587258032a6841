"""Mutants: realistic student bugs the suite must catch ("every test can fail"). Staff only.

Each mutant is one row of tests/staff/mutants/table.py: one textual edit of a module of the reference
(forgetting to average, an off-by-one chunk, a missing wait...) and the slice of the suite that must catch
it. Importing this package installs a finder (loader.py) that makes ``tests.staff.mutants.<id>`` a package
following the contract, the reference with that edit, built in memory in every process that imports it; so
``pytest tests/... --impl tests.staff.mutants.<id>`` runs the suite against the bug. test_mutants.py runs
each row's slice against its mutant (runner.py, server.py) and requires it to fail with a telling message,
within a time limit, so the mutant tests also prove that a bug never hangs the suite.

To add a mutant: add a row to table.py (``pytest tests/staff/mutants -k <id>`` checks it).
"""

from tests.staff.mutants.loader import install

install()
