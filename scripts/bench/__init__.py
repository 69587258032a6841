"""Benchmarks, one module per part (``python -m scripts.bench.<part>``), and what they share.

``common.py`` launches the ranks, times a step the same way everywhere (``timed``: barrier, run,
synchronise the device, the slowest rank's time) and writes tables and plots; ``zero.py`` is the
training loop the two ZeRO benchmarks (``sharded_optimizer``, ``fsdp``) share. ``harness.py``
measures the test harness, not a part (tests/README.md quotes it).
"""
