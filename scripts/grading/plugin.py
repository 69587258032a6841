"""The grader's pytest plugin: reports every test's outcome to the grader over a private, signed channel.

Loaded by ``scripts/grading/runner.py`` as ``pytest -p scripts.grading.plugin`` inside the sandbox
(sandbox.py copies this file and channel.py there under the same names); never used by students.

Why a channel of its own: the grader never reads pytest's stdout (a submission can print a fake
summary) nor a results file (a submission can write one). Instead:
- the runner passes an inherited pipe's write end (``--grading-fd``) that only this process holds
  (rank processes are started with ``close_fds``), and a per-run secret key on a second pipe
  (``--grading-key-fd``; not in argv or the environment, which other processes can read);
- every event is one line signed under that key (wire format: channel.py); the runner drops lines
  that do not verify or arrive out of order;
- this process makes itself non-dumpable, so a rank running as the same (non-root) user cannot read
  its memory or its file descriptors through /proc (``python -m scripts.grading --run-as`` covers root).

The one place where data from student code enters this process, the rank replies, is hardened by
the harness itself (tests/harness/replies.py: only plain data is rebuilt).

In the hidden run (``--grading-redact``) a failure is reported as ``redacted`` text: the grader's own words,
or the test's assertion message only when nothing in it came from a rank. Every string a rank sends back
in the run is noted (``RankText``), and a message that quotes one, holds a piece of one, or has a traceback
is replaced by a fixed line; paths are blanked. This holds whatever an oracle puts in its messages: an
oracle that returns a rank's traceback and quotes it on failure (tests/oracles/ddp.py did) leaks nothing.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re

import pytest

from scripts.grading import channel
from tests.harness.limits import make_undumpable
from tests.harness.pool import HUNG_FUNCTIONS

OUTPUT_LIMIT = 6000  # characters of failure text kept per test; the grader truncates further
WITHHELD = "failed; details are withheld for hidden tests (the staff's log has them)"
RANK_FAILED = ("a rank did not finish normally (it raised, hung or died); in hidden tests the ranks' messages, "
               "tracebacks and output are not shown: reproduce it with the public tests")  # fmt: skip
SHOWN_LIMIT = 600  # a hidden test's assertion message longer than this is withheld (it is not a value's story)
PIECE = 16  # a message holding this many characters in a row of a rank's text is withheld
NAME = re.compile(r"[A-Za-z0-9_.\-]{0,48}")  # a rank's string like this (a parameter's name) may be named ...
PATH = re.compile(r"(?<![\w.])(?:/[\w.+@~-]+){2,}/?|[\w.-]+(?:/[\w.-]+)*\.py\b")  # ... but never a path or file


# -- the signed channel -----------------------------------------------------------------------------


class _Channel:
    def __init__(self, fd: int, key: bytes):
        self.fd, self.key, self.seq = fd, key, 0

    def send(self, event: str, **fields) -> None:
        self.seq += 1
        data = channel.encode(self.key, self.seq, event, **fields)
        while data:
            data = data[os.write(self.fd, data) :]


def _read_key(fd: int) -> bytes:
    """The key arrives as one hex line on a second inherited pipe, closed right after."""
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = os.read(fd, 256)
        if not chunk:
            break
        buf += chunk
    os.close(fd)
    return bytes.fromhex(buf.decode().strip())


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`(\"'])")


def summary_of(doc: str | None) -> str:
    """A test's one-line summary for its entry: the first sentence of its docstring's first paragraph, its lines
    joined (a docstring's first line may end mid-sentence); the whole paragraph when it has no sentence end."""
    paragraph = re.split(r"\n\s*\n", (doc or "").strip(), maxsplit=1)[0]
    text = " ".join(paragraph.split())
    return _SENTENCE_END.split(text, maxsplit=1)[0]


def _item_info(item: pytest.Item) -> dict:
    return {
        "nodeid": item.nodeid,
        "file": item.nodeid.split("::", 1)[0],
        "function": getattr(item, "originalname", None) or item.name.split("[", 1)[0],
        "markers": sorted({m.name for m in item.iter_markers()}),
        "doc": summary_of(getattr(item, "function", None) and item.function.__doc__),
    }


class BudgetSpent(pytest.fail.Exception):
    """A test not run because its part's time budget is spent: a pytest failure without traceback, whose
    message (the grader's own words) is shown even for hidden tests."""


class RankText:
    """Every string the ranks have sent back in this pytest process (their replies, rebuilt by the harness), to tell
    a message the test computed from values from one that carries a rank's text. Kept for the whole process, not
    per test: a fixture shared by several tests runs its ranks once."""

    MAX_NODES, MAX_CHARS = 1_000_000, 8 << 20  # a reply past these makes every later message withheld

    def __init__(self):
        self.names: set[str] = set()  # short name-like strings (parameter names, op names)
        self.texts: set[str] = set()  # every other string
        self.chars = 0
        self.overflow = False
        self._joined: str | None = None

    def add(self, value) -> None:
        todo, nodes = [value], 0
        while todo:  # a loop, not recursion: a reply may nest deeply
            nodes += 1
            if nodes > self.MAX_NODES:
                self.overflow = True
                return
            v = todo.pop()
            if isinstance(v, (bytes, bytearray)):
                v = bytes(v).decode("utf-8", "replace")
            if isinstance(v, str):
                if NAME.fullmatch(v):
                    self.names.add(v)
                elif v not in self.texts:
                    self.texts.add(v)
                    self.chars += len(v)
                    self._joined = None
                    self.overflow |= self.chars > self.MAX_CHARS
            elif isinstance(v, dict):
                todo += [*v.keys(), *v.values()]
            elif isinstance(v, (list, tuple, set, frozenset)):
                todo += list(v)
            elif dataclasses.is_dataclass(v) and not isinstance(v, type):
                todo += [getattr(v, f.name, None) for f in dataclasses.fields(v)]

    def found_in(self, message: str) -> bool:
        """Whether ``message`` quotes a rank's string, holds one, or holds ``PIECE`` characters of one."""
        if self.overflow:
            return True
        if any(repr(s) in message for s in self.names if s) or any(len(s) >= 4 and s in message for s in self.texts):
            return True
        if self._joined is None:
            self._joined = "\0".join(self.texts)
        return any(message[i : i + PIECE] in self._joined for i in range(len(message) - PIECE + 1))


RANK_TEXT = RankText()


def watch_rank_replies(seen: RankText) -> None:
    """Note every rank reply the harness rebuilds in this process (tests/harness/pool.py's ``load_reply``)."""
    from tests.harness import pool

    load = pool.load_reply

    def load_and_note(data: bytes):
        value = load(data)
        seen.add(value)
        return value

    pool.load_reply = load_and_note


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception and every exception it was raised from or while handling."""
    out, todo = [], [exc]
    while todo:
        e = todo.pop()
        if e is not None and all(e is not o for o in out):
            out.append(e)
            todo += [e.__cause__, e.__context__]
    return out


def sanitized(text: str, seen: RankText) -> str | None:
    """``text`` with paths blanked, or None when it may carry what a rank sent (or is a traceback)."""
    if len(text) > SHOWN_LIMIT or "Traceback (most recent call last)" in text or 'File "' in text:
        return None
    if seen.found_in(text):
        return None
    return PATH.sub("<path>", text)


def redacted(excinfo: pytest.ExceptionInfo, seen: RankText | None = None) -> str:
    """What a hidden test's failure may show: the grader's own words, or the test's own assertion message when
    nothing in it came from a rank; never the test's source (pytest's traceback quotes it) nor what a rank
    raised, printed or returned as text (a submission could put there what it read, e.g. the hidden test file
    itself), nor a path."""
    exc = excinfo.value
    if isinstance(exc, BudgetSpent):  # the grader's own words
        return str(exc)
    if any(c.__name__ == "RankFailure" for e in _chain(exc) for c in type(e).__mro__):  # tests/harness/pool.py
        return RANK_FAILED
    if isinstance(exc, AssertionError):
        message = str(exc).split("\nassert ", 1)[0]  # pytest appends the rewritten expression: test source
        shown = sanitized(message, seen or RankText())
        return f"AssertionError: {shown}" if shown is not None else WITHHELD
    return f"{type(exc).__name__} raised while the test judged the results (details not shown for hidden tests)"


class GradingReporter:
    def __init__(self, channel: _Channel, redact: bool = False, budgets: dict | None = None):
        self.channel = channel
        self.redact = redact  # the hidden run: failures show redacted() text only
        budgets = budgets or {}
        self.file_parts: dict[str, str] = budgets.get("files", {})  # test file -> its part
        self.left: dict[str, float] = dict(budgets.get("seconds", {}))  # part -> seconds its tests may still take
        self.phases: dict[str, dict] = {}
        self.redacted: dict[str, dict[str, str]] = {}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        yield
        if self.redact and call.excinfo is not None:
            self.redacted.setdefault(item.nodeid, {})[call.when] = redacted(call.excinfo, RANK_TEXT)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.channel.send("collect_error", nodeid=report.nodeid, output=str(report.longrepr)[-OUTPUT_LIMIT:])

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.channel.send("collected", items=[_item_info(i) for i in session.items])

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        """A part whose time budget is spent: its remaining tests fail at once instead of running."""
        part = self.file_parts.get(item.nodeid.split("::", 1)[0])
        if part in self.left and self.left[part] <= 0:
            raise BudgetSpent(f"not run: the tests of part {part!r} had used up its time budget (an earlier test "
                              "hung or was very slow); see that test's failure", pytrace=False)  # fmt: skip

    def pytest_runtest_logstart(self, nodeid: str, location) -> None:
        self.phases[nodeid] = {}
        self.channel.send("start", nodeid=nodeid)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.phases.setdefault(report.nodeid, {})[report.when] = report

    def pytest_runtest_logfinish(self, nodeid: str, location) -> None:
        phases = self.phases.pop(nodeid, {})
        failed = [r for r in phases.values() if r.failed]
        call = phases.get("call")
        if failed and self.redact:
            hidden = self.redacted.pop(nodeid, {})
            outcome = "failed"
            text = "\n".join(f"[{r.when}] {hidden.get(r.when, 'failed (details not shown)')}" for r in failed)
        elif failed:
            outcome, text = "failed", "\n".join(f"[{r.when}] {r.longreprtext}" for r in failed)
        elif call is not None and call.passed:
            outcome, text = "passed", ""
        elif any(r.skipped for r in phases.values()):
            skipped = next(r for r in phases.values() if r.skipped)
            outcome, text = "skipped", str(skipped.longrepr[-1] if isinstance(skipped.longrepr, tuple) else "")
            if self.redact:  # a reason is the staff's words, but a test could build one from a rank's reply
                text = sanitized(text, RANK_TEXT) or "skipped (the reason is withheld for hidden tests)"
        else:
            outcome, text = "failed", "the test did not run to completion"
        duration = sum(r.duration for r in phases.values())
        hung = dict(HUNG_FUNCTIONS)  # functions that hung so far: the next run of this grade refuses them too
        part = self.file_parts.get(nodeid.split("::", 1)[0])
        if part in self.left:
            self.left[part] -= duration
        self.channel.send("result", nodeid=nodeid, outcome=outcome, output=text[-OUTPUT_LIMIT:], duration=duration,
                          hung=hung)  # fmt: skip

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus) -> None:
        self.channel.send("finished", exitstatus=int(exitstatus))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--grading-fd", type=int, default=None, help="(grader only) fd of the signed results channel")
    parser.addoption("--grading-key-fd", type=int, default=None, help="(grader only) fd the channel's key comes on")
    parser.addoption("--grading-redact", action="store_true", help="(grader only) hidden tests: redacted failures")
    parser.addoption("--grading-budgets", default="", help="(grader only) JSON: file -> part, part -> seconds left")


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    fd = config.getoption("--grading-fd")
    if fd is None:
        return
    make_undumpable()
    key = _read_key(config.getoption("--grading-key-fd"))
    budgets = json.loads(config.getoption("--grading-budgets") or "{}")
    reporter = GradingReporter(_Channel(fd, key), redact=config.getoption("--grading-redact"), budgets=budgets)
    if reporter.redact:
        watch_rank_replies(RANK_TEXT)
    config.pluginmanager.register(reporter, "cs336-grading-reporter")
