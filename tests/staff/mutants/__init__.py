"""Mutants: realistic student bugs the suite must catch ("every test can fail"). Staff only.

Each mutant is a package ``tests.staff.mutants.<name>`` that follows the contract for the modules it
needs: usually ``from reference_solutions.<module> import *`` with one function or method
replaced by a buggy version (forgetting to average, an off-by-one chunk, a missing wait...).
``tests/staff/mutants/test_<idea>_mutants.py`` are each a table of ``Mutant`` rows (runner.py): a slice of
the real suite runs against each mutant in a subprocess (``pytest ... --impl tests.staff.mutants.<name>``)
and must fail with a telling message, within a time limit, so the mutant tests also prove that a bug
never hangs the suite.
"""
