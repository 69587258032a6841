"""Staff-only tests: mutants, grader tests, hidden tests and the stub/reference parity test (never shipped)."""
