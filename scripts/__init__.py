"""The kit's tools. Run a file (``python scripts/bench_ddp.py``) or, from the repository root, a module
(``python -m scripts.check_stubs``); modules here import each other as ``scripts.<name>``."""
