"""The signed results channel's wire format, defined once: plugin.py encodes, runner.py decodes.

    line = encode(key, seq=1, event="start", nodeid="tests/test_ddp.py::test_x")   # bytes, ends in b"\\n"
    event = decode(key, line.rstrip(b"\\n"))     # the dict, or None when the MAC does not verify

One event per line: compact JSON ``{"seq": n, "event": ..., ...}``, a tab, then the hex HMAC-SHA256
of the JSON under the per-run key. JSON never holds a raw tab or newline, so both split cleanly.
The reader also requires ``seq`` to count up from 1 (runner.py), so a replayed or dropped line shows.
The plugin imports this module inside the sandbox too (sandbox.py copies both files there).
"""

from __future__ import annotations

import hashlib
import hmac
import json

MAX_LINE = 1 << 20  # bytes; a longer line is not from the plugin (it truncates its output fields)


def _mac(key: bytes, body: bytes) -> bytes:
    return hmac.new(key, body, hashlib.sha256).hexdigest().encode()


def encode(key: bytes, seq: int, event: str, **fields) -> bytes:
    body = json.dumps({"seq": seq, "event": event, **fields}, separators=(",", ":")).encode()
    return body + b"\t" + _mac(key, body) + b"\n"


def decode(key: bytes, line: bytes) -> dict | None:
    """The event of one line (without its newline), or None if it is malformed or its MAC is wrong."""
    body, tab, mac = line.rpartition(b"\t")
    if not tab or not hmac.compare_digest(_mac(key, body), mac):
        return None
    try:
        event = json.loads(body)
    except ValueError:
        return None
    return event if isinstance(event, dict) else None
