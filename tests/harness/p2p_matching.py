"""Tag-blind point-to-point matching: NCCL's rule for send/recv, enforced on gloo inside each rank.

NCCL ignores ``tag``: between two ranks of a group, the k-th receive one posts gets the k-th
message the other sent, whatever their tags. Gloo matches by tag, so code whose sends and receives
are posted in different orders (and only tags pair them up) passes on gloo and computes garbage,
or hangs, on GPUs. Under ``--p2p-matching tag-blind`` (the default; ``CS336_P2P_MATCHING``) the
harness makes gloo follow NCCL's rule and says so when code relies on tags:

- every ``ProcessGroup.send``/``recv`` goes to gloo with tag 0, so gloo matches first-in first-out
  per pair of ranks and direction, as NCCL does (it patches below the communication recorder);
- the k-th send from rank a to rank b in a group writes (its tag, numel, dtype, shape, call site)
  to the rank pool's store; when the k-th receive on b from a completes (its ``Work.wait``, or the
  error gloo raises when the sizes differ) it reads that record, and if the tag, dtype or element
  count differs from its own it raises ``CrossedMessages`` naming the pair of ranks, both messages
  (index, tag, shape, dtype, where posted), and the rule.

Gloo's own blocking ``send`` already waits until the peer has posted the matching receive, as
NCCL's may: two ranks that both begin with a blocking ``dist.send`` to each other deadlock, and the
test's deadline shows every rank's stack. Cost: one store write per send and one read per receive
(~0.1 ms a message on a loaded 2-core machine). ``--p2p-matching tags`` turns all of it off
(gloo's own matching by tag); it never applies to NCCL, which is tag-blind by itself.
"""

from __future__ import annotations

import sys
import threading

from torch._C._distributed_c10d import ProcessGroup, Work

MODES = ("tag-blind", "tags")
RULE = (
    "NCCL ignores tag: between two ranks the k-th receive gets the k-th message sent, so post sends and "
    "receives between two ranks in the same order on both sides (one order for shape headers and payloads). "
    "The harness applies this rule on gloo too (--p2p-matching tag-blind, the default; --p2p-matching tags "
    "or CS336_P2P_MATCHING=tags turns it off)"
)


class CrossedMessages(RuntimeError):
    """A receive got a message other than the one it was posted for (by tag, dtype or size)."""


def _call_site() -> str:
    """file:line in function of the first frame outside torch and this harness (who posted the message)."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if not (name.startswith("torch") or name.startswith("tests.harness")):
            code = frame.f_code
            return f"{code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno} in {code.co_name}"
        frame = frame.f_back
    return "?"


def _describe(tensors) -> tuple[int, str, tuple[int, ...]]:
    t = tensors[0] if isinstance(tensors, (list, tuple)) and tensors else tensors
    return int(t.numel()), str(t.dtype).replace("torch.", ""), tuple(t.shape)


class TagBlindMatching:
    """Installed around one task in a rank (tests/harness/worker.py); ``store`` is private to the task."""

    def __init__(self, store, rank: int) -> None:
        self.store, self.rank = store, rank
        self._saved: dict = {}
        self._counts: dict = {}  # (group name, src, dst) -> messages posted so far
        self._ranks: dict = {}  # ProcessGroup -> its global ranks
        self._pending: dict = {}  # id(work) -> (work, what to check when it completes)
        self._lock = threading.Lock()

    # -- install / remove ---------------------------------------------------------------------

    def __enter__(self) -> TagBlindMatching:
        for owner, name, wrap in [(ProcessGroup, "send", self._wrap_send), (ProcessGroup, "recv", self._wrap_recv),
                                  (Work, "wait", self._wrap_wait)]:  # fmt: skip
            raw = vars(owner)[name]  # the descriptor itself (see recorder.py for why not getattr)
            self._saved[(owner, name)] = raw
            setattr(owner, name, wrap(getattr(owner, name)))
        return self

    def __exit__(self, *exc) -> None:
        for (owner, name), raw in self._saved.items():
            setattr(owner, name, raw)
        self._saved.clear()
        self._pending.clear()

    def check_completed(self) -> None:
        """At the end of a task: check the receives that completed but were never waited on."""
        for work, info in list(self._pending.values()):
            if work.is_completed():
                self._check(info, None)
        self._pending.clear()

    # -- bookkeeping ----------------------------------------------------------------------------

    def _key(self, pg, src_group_rank: int | None, dst_group_rank: int | None) -> tuple:
        ranks = self._ranks.get(pg)
        if ranks is None:
            import torch.distributed as dist

            ranks = self._ranks[pg] = tuple(dist.get_process_group_ranks(pg))
        src = ranks[src_group_rank] if src_group_rank is not None else self.rank
        dst = ranks[dst_group_rank] if dst_group_rank is not None else self.rank
        pair = (pg.group_name, src, dst)
        with self._lock:
            k = self._counts.get(pair, 0)
            self._counts[pair] = k + 1
        return pair, k, ranks

    def _wrap_send(self, original):
        matching = self

        def send(pg, tensors, dst, tag=0):
            (group, src, dst_rank), k, _ranks = matching._key(pg, None, dst)
            numel, dtype, shape = _describe(tensors)
            matching.store.set(f"{group}/{src}>{dst_rank}/{k}", f"{tag}|{numel}|{dtype}|{shape}|{_call_site()}")
            return original(pg, tensors, dst, 0)

        return send

    def _wrap_recv(self, original):
        matching = self

        def recv(pg, tensors, src, tag=0):
            pair, k, ranks = matching._key(pg, src, None)
            work = original(pg, tensors, src, 0)
            numel, dtype, shape = _describe(tensors)
            with matching._lock:
                matching._pending[id(work)] = (work, (pair, k, ranks, tag, numel, dtype, shape, _call_site()))
            return work

        return recv

    def _wrap_wait(self, original):
        matching = self

        def wait(work, *args, **kwargs):
            entry = matching._pending.pop(id(work), None)
            if entry is None:
                return original(work, *args, **kwargs)
            try:
                result = original(work, *args, **kwargs)
            except RuntimeError as exc:  # e.g. gloo: a message larger than the buffer
                matching._check(entry[1], exc)
                raise
            matching._check(entry[1], None)
            return result

        return wait

    def _check(self, info, error: Exception | None) -> None:
        (group, src, dst), k, ranks, tag, numel, dtype, shape, where = info
        key = f"{group}/{src}>{dst}/{k}"
        if error is not None and not self.store.check([key]):
            return  # nothing was sent for this receive: gloo's own error stands
        sent = self.store.get(key).decode().split("|", 4)
        s_tag, s_numel, s_dtype, s_shape, s_where = int(sent[0]), int(sent[1]), sent[2], sent[3], sent[4]
        if (s_tag, s_numel, s_dtype) == (tag, numel, dtype):
            return
        lines = [
            f"point-to-point messages crossed from rank {src} to rank {dst} (group of global ranks {list(ranks)}): "
            f"rank {dst}'s receive #{k} from rank {src} (tag {tag}, {numel} x {dtype}, shape {shape}, posted at "
            f"{where}) was matched with rank {src}'s send #{k} to rank {dst} (tag {s_tag}, {s_numel} x {s_dtype}, "
            f"shape {s_shape}, posted at {s_where})."
        ]
        for j in [*range(k + 1, k + 33), *range(max(0, k - 32), k)]:  # the send this receive was meant for
            other = f"{group}/{src}>{dst}/{j}"
            if not self.store.check([other]):
                continue
            o = self.store.get(other).decode().split("|", 4)
            if (int(o[0]), int(o[1]), o[2]) == (tag, numel, dtype):
                lines.append(f"The send that fits it is rank {src}'s send #{j} (tag {o[0]}, {o[1]} x {o[2]}, shape "
                             f"{o[3]}, posted at {o[4]}).")  # fmt: skip
                break
        lines.append(RULE + ".")
        raise CrossedMessages(" ".join(lines)) from error
