"""Staff-only tests: mutants, grader tests, hidden tests, the stub generator's check (never shipped)."""
