"""The messages between the parent (``pool.py``) and a rank (``worker.py``), defined once.

Length-prefixed pickles on one socket per rank:

    parent -> worker   {"task": n, "fn": <module-level function>, "args": ..., "kwargs": ...,
                        "impl": "cs336_systems", "backend": "gloo", "fresh_group": True}
    worker -> parent   {"status": "ready", "pid": 1234}                               once, at start-up
                       {"task": n, "status": "ok", "value": <tensors on the CPU>, "group_kept": True}
                       {"task": n, "status": "error", "error": "ValueError: ...", "traceback": "..."}

``fresh_group`` tells every rank to replace the default process group before the task (the parent
decides, so all ranks agree); ``group_kept`` says the task left that group as it found it.
The parent itself marks a rank ``hung`` (no reply by the deadline) or ``died`` (its socket
closed, or it sent a reply the parent refused). On the wire a status is its plain string value:
the parent's restricted unpickler (``replies.py``) rebuilds plain data only, never an enum.
"""

from __future__ import annotations

from enum import Enum


class Status(str, Enum):
    """What one rank did with one task; compares equal to its wire string (``Status.OK == "ok"``)."""

    READY = "ready"  # the worker started and waits for tasks
    OK = "ok"  # the rank function returned
    ERROR = "error"  # it raised (SystemExit included), or its task or result did not pickle
    HUNG = "hung"  # no answer by the deadline (set by the parent)
    DIED = "died"  # the process ended, or its reply was refused (set by the parent)

    def __str__(self) -> str:
        return self.value

    @property
    def finished(self) -> bool:
        """The rank did its part (for a failure report: nothing to show for it)."""
        return self in (Status.READY, Status.OK)


def reply(task: int | None, status: Status, **fields) -> dict:
    """A worker's reply as plain data: the status travels as its string value."""
    return {"task": task, "status": status.value, **fields}
