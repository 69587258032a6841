"""Shared test oracles: what the tests (public and hidden) and the scripts compute to judge or draw.

One small module per oracle, each with a docstring saying what it computes and who uses it:

    pipeline_sim   the unit-time pipeline simulator (deadlock, bubble, Gantt timelines)

Public tests, hidden tests and scripts import these from ``tests.oracles.<module>``; a test module
never imports another test module (tests/test_oracles.py checks it). This package ships to
students with the public tests, so it holds no reference code: the implementation under test is
loaded only inside ranks, with ``ctx.load``.
"""
