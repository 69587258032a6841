"""Staff tests of the grader: each grades a crafted submission through ``python -m scripts.grading``."""

import os


def grader_env() -> dict[str, str]:
    """This environment without the suite's own ``CS336_`` settings: the grade's command line alone decides."""
    return {k: v for k, v in os.environ.items() if not k.startswith("CS336_")}
