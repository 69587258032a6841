"""Release tools (staff): ``cut.py`` writes and checks the student release, ``check_stubs.py`` checks that
the stubs fail every test cleanly, ``api_reference.py`` writes handouts/api.md from the stubs' docstrings."""
