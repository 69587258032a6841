"""Release tools (staff): ``stubs.py`` generates the student stubs and handouts/api.md from the reference
(through ``api_reference.py``), ``cut.py`` writes and checks the student release, ``check_stubs.py`` checks
that the stubs fail every test cleanly."""
