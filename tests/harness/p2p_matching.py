"""Tag-blind point-to-point matching: NCCL's rule for send/recv, enforced on gloo inside each rank.

NCCL ignores ``tag``: between two ranks of a group, the k-th receive one posts gets the k-th
message the other sent, whatever their tags. Gloo matches by tag, so code whose sends and receives
are posted in different orders (and only tags pair them up) passes on gloo and computes garbage,
or hangs, on GPUs. Under ``--p2p-matching tag-blind`` (the default; ``CS336_P2P_MATCHING``) the
harness makes gloo follow NCCL's rule and says so when code relies on tags:

- every ``ProcessGroup.send``/``recv`` goes to gloo with tag 0, so gloo matches first-in first-out
  per pair of ranks and direction, as NCCL does (it patches below the communication recorder);
- before the k-th send from rank a to rank b in a group is handed to gloo, and before the k-th
  receive on b from a is, each side puts its description (tag, numel, dtype, shape, call site) under
  one key of the rank pool's store with ``compare_set``: the first side writes it, the second gets
  the first's back and compares. If the tags, dtypes or element counts differ, the second side
  raises ``CrossedMessages`` naming the pair of ranks, both messages (index, tag, shape, dtype,
  where posted) and the rule, without posting its own half, so gloo never receives a larger
  message into a smaller buffer (which would abort the rank process).

Gloo's own blocking ``send`` already waits until the peer has posted the matching receive, as
NCCL's may: two ranks that both begin with a blocking ``dist.send`` to each other deadlock, and the
test's deadline shows every rank's stack. Cost: one ``compare_set`` on the pool's ``FileStore`` per
send and per receive (tens of microseconds each). ``--p2p-matching tags`` turns all of it off
(gloo's own matching by tag); it never applies to NCCL, which is tag-blind by itself.
"""

from __future__ import annotations

import sys
import threading

from torch._C._distributed_c10d import ProcessGroup

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
        self._lock = threading.Lock()

    def __enter__(self) -> TagBlindMatching:
        for name in ("send", "recv"):
            raw = vars(ProcessGroup)[name]  # the descriptor itself (see recorder.py for why not getattr)
            self._saved[name] = raw
            setattr(ProcessGroup, name, self._wrap(name, getattr(ProcessGroup, name)))
        return self

    def __exit__(self, *exc) -> None:
        for name, raw in self._saved.items():
            setattr(ProcessGroup, name, raw)
        self._saved.clear()

    def _wrap(self, kind: str, original):
        matching = self

        def post(pg, tensors, peer, tag=0):
            matching._match(kind, pg, tensors, peer, tag)
            return original(pg, tensors, peer, 0)

        post.__name__ = kind
        return post

    def _match(self, kind: str, pg, tensors, peer: int, tag: int) -> None:
        ranks = self._ranks.get(pg)
        if ranks is None:
            import torch.distributed as dist

            ranks = self._ranks[pg] = tuple(dist.get_process_group_ranks(pg))
        src, dst = (self.rank, ranks[peer]) if kind == "send" else (ranks[peer], self.rank)
        pair = (pg.group_name, src, dst)
        with self._lock:
            k = self._counts.get(pair, 0)
            self._counts[pair] = k + 1
        numel, dtype, shape = _describe(tensors)
        mine = f"{kind}|{tag}|{numel}|{dtype}|{shape}|{_call_site()}"
        key = f"{pair[0]}/{src}>{dst}/{k}"
        theirs = self.store.compare_set(key, "", mine).decode()
        if theirs == mine:
            return  # first to post: the peer compares when it posts its half
        other = theirs.split("|", 5)
        if (int(other[1]), int(other[2]), other[3]) != (tag, numel, dtype):
            self._raise(kind, key, k, src, dst, ranks, mine.split("|", 5), other)

    def _raise(self, kind, key, k, src, dst, ranks, mine, other) -> None:
        send, recv = (mine, other) if kind == "send" else (other, mine)

        def said(parts) -> str:
            return f"tag {parts[1]}, {parts[2]} x {parts[3]}, shape {parts[4]}, posted at {parts[5]}"

        lines = [
            f"point-to-point messages crossed from rank {src} to rank {dst} (group of global ranks {list(ranks)}): "
            f"rank {dst}'s receive #{k} from rank {src} ({said(recv)}) is matched with rank {src}'s send #{k} to "
            f"rank {dst} ({said(send)})."
        ]
        base = key.rsplit("/", 1)[0]
        for j in [*range(k + 1, k + 33), *range(max(0, k - 32), k)]:  # the send this receive was meant for
            if not self.store.check([f"{base}/{j}"]):
                continue
            o = self.store.get(f"{base}/{j}").decode().split("|", 5)
            if o[0] == "send" and o[1:4] == recv[1:4]:
                lines.append(f"The send that fits that receive is rank {src}'s send #{j} ({said(o)}).")
                break
        lines.append(RULE + ".")
        raise CrossedMessages(" ".join(lines))
