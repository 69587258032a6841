"""Student tools: ``trace.py`` draws a test's communication trace, ``memory.py`` and ``plan.py`` are the
ZeRO-memory and parallelism planners over accounting.py, ``submission.py`` zips what you hand in."""
