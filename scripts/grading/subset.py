"""A kit with only some parts: what the release cut and the Gradescope zip keep, and what becomes given code.

    python -m scripts.release.cut OUT --parts 2,4                     # the student release of parts 2 and 4
    python -m scripts.grading.make_autograder_zip --parts 2,4         # their Gradescope autograder zip
    python -m scripts.grading.subset --check                          # CI: DEPENDS agrees with the code's imports

A subset keeps, for its parts: the stubs, the public and hidden tests (the rubric's ``files`` and
``hidden_files``), the handouts, the benchmarks, the handouts' figures, the rubric entries (written ones
too) and the README rows. Every other part's files go, except what the kept parts build on:

* a part module that a kept module imports, or that a kept part's tests load (``ctx.load("ddp")``), is
  shipped as **given code**: the reference, solution blocks and all (a course skipping Part 1 gives its
  collectives; Part 7's mesh runs on the reference DDP, ZeRO, TP and pipeline of parts 2-5 when those are
  not assigned);
* ``accounting.py`` holds several parts' tasks (§1.7, §5.6, Part 6, §7.4, §8.4, §9.4): a kept part's tasks
  stay stubs, every other task is given (the benchmarks and tools of kept parts call them);
* a part module nobody kept needs stays the plain stub (no test runs it; the solution does not ship).

``DEPENDS`` below is the one statement of who builds on whom; ``--check`` (CI) recomputes it from the
reference's imports and the tests' ``load("...")`` calls and fails when they differ.
"""

from __future__ import annotations

import argparse
import fnmatch
import re
import sys
from pathlib import Path

from scripts.grading.rubric import load_rubric

ROOT = Path(__file__).resolve().parents[2]

# module -> the part modules it builds on (its reference imports them, or its part's tests load them).
DEPENDS: dict[str, tuple[str, ...]] = {
    "collectives": (),
    "ddp": (),
    "sharded_optimizer": (),
    "fsdp": (),
    "tensor_parallel": (),
    "pipeline": (),
    "accounting": (),
    "mesh": ("ddp", "fsdp", "pipeline", "sharded_optimizer", "tensor_parallel"),
    "expert_parallel": (),
    "context_parallel": (),
    # Part 10 (failures at scale), once its modules are part modules (scripts/tools/submission.py PART_MODULES):
    "checkpoint": ("tensor_parallel",),
    "fault_tolerance": ("checkpoint", "ddp", "fsdp"),
    # Part 11 (the capstone) composes parts 2-5 and 7-9 on one transformer.
    "parallelize": (
        "context_parallel",
        "ddp",
        "expert_parallel",
        "fsdp",
        "mesh",
        "pipeline",
        "sharded_optimizer",
        "tensor_parallel",
    ),
}

_BEGIN = re.compile(r"^(?P<indent>[ \t]*)# BEGIN SOLUTION(?::\s*(?P<task>Task (?P<part>\d+)\.(?P<sub>\d+)\b.*?))?\s*$")
_END = re.compile(r"^[ \t]*# END SOLUTION\s*$")
_DEFINES = re.compile(r"^[ \t]*(?:def|class)\s+(\w+)|^[ \t]*(\w+)\s*(?::[^=]*)?=(?!=)", re.M)


def parse_parts(text: str | None) -> frozenset[int] | None:
    """``"1,2,3"`` -> {1, 2, 3}; None (no option) -> None: the whole kit."""
    if not text:
        return None
    try:
        parts = frozenset(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise SystemExit(f"--parts: a comma-separated list of part numbers, got {text!r}") from None
    known = {p.number for p in load_rubric().parts.values()}
    if not parts or not parts <= known:
        raise SystemExit(f"--parts {text}: parts must be among {sorted(known)}")
    return parts


def module_parts() -> dict[str, int]:
    """Each part module's handout part (the rubric's entries are named after their modules)."""
    return {p.name: p.number for p in load_rubric().parts.values()}


def needed_modules(parts: frozenset[int]) -> set[str]:
    """The kept parts' modules and everything they build on (transitively)."""
    owner = module_parts()
    todo = [m for m, n in owner.items() if n in parts]
    seen: set[str] = set()
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo += DEPENDS.get(m, ())
    return seen


def given_modules(parts: frozenset[int]) -> set[str]:
    """The modules of other parts that ship as given code (the reference)."""
    owner = module_parts()
    return {m for m in needed_modules(parts) if owner.get(m) not in parts and m != "accounting"}


# -- stubs -------------------------------------------------------------------------------------------------


def _blocks(source: str) -> list[tuple[str, re.Match | None, str]]:
    """The source as ("code", None, text) and ("solution", begin-marker match, body) pieces."""
    pieces, block, body, code = [], None, [], []
    for line in source.splitlines(keepends=True):
        if block is None:
            block = _BEGIN.match(line)
            if block is None:
                code.append(line)
            else:
                pieces.append(("code", None, "".join(code)))
                code, body = [], []
        elif _END.match(line):
            pieces.append(("solution", block, "".join(body)))
            block = None
        else:
            body.append(line)
    pieces.append(("code", None, "".join(code)))
    return pieces


def subset_stub(module: str, parts: frozenset[int]) -> str:
    """``cs336_systems/<module>.py`` for a kit of ``parts``: the reference for a given module, else the stub with
    the tasks of other parts filled in (and the private helpers those need)."""
    from scripts.release import stubs

    source = (stubs.REFERENCE / f"{module}.py").read_text()
    if module in given_modules(parts):
        text = "".join(body for _, _, body in _blocks(source))  # markers dropped, everything kept
    else:
        pieces = _blocks(source)
        keep = [kind == "code" or (m["task"] and int(m["part"]) not in parts) for kind, m, _ in pieces]
        changed = True
        while changed:  # an untagged block (a helper) stays when a kept solution uses a name it defines
            changed = False
            kept_text = "".join(body for (kind, _, body), k in zip(pieces, keep) if k and kind == "solution")
            for i, (kind, m, body) in enumerate(pieces):
                if kind == "solution" and not m["task"] and not keep[i]:
                    names = {a or b for a, b in _DEFINES.findall(body)}
                    if any(re.search(rf"\b{re.escape(n)}\b", kept_text) for n in names if n):
                        keep[i] = changed = True
        out = []
        for (_, m, body), k in zip(pieces, keep):
            if k:
                out.append(body)
            elif m["task"]:
                where = f"{stubs.handout_of(int(m['part']))} §{m['part']}.{m['sub']}"
                out.append(f'{m["indent"]}raise NotImplementedError("{m["task"]}: see {where}")\n')
        text = "".join(out)
    text = text.replace("reference_solutions", "cs336_systems")
    if module in given_modules(parts):  # its handout is not in the kit, and the student does not write it
        text = re.sub(r"Your task \(handouts/(\d\d)-[^)]*\): implement",
                      lambda m: f"Given code in this kit (Part {int(m[1])} is not assigned): the staff's "
                      "implementation of", text)  # fmt: skip
        text = re.sub(r"handouts/(\d\d)-[\w-]+\.md", lambda m: f"Part {int(m[1])}'s handout (not in this kit)", text)
    filename = f"cs336_systems/{module}.py"
    text = stubs._ruff(["check", "--fix-only", "--exit-zero", "--select", "F401,I"], text, filename)
    return stubs._ruff(["format"], text, filename)


def subset_stubs(parts: frozenset[int]) -> dict[str, str]:
    """Every part module's text in the kit of ``parts`` ({module: source}); unchanged stubs included."""
    from scripts.tools.submission import PART_MODULES

    given = given_modules(parts)
    out = {}
    for module in PART_MODULES:
        if not (ROOT / "cs336_systems" / f"{module}.py").exists():  # a part still being written: not in any kit
            continue
        mixed = module == "accounting"
        out[module] = (
            subset_stub(module, parts)
            if module in given or mixed
            else (ROOT / "cs336_systems" / f"{module}.py").read_text()
        )
    return out


def kit_manifest(parts: frozenset[int] | None) -> dict:
    """Which part modules a student of the kit writes, which are given and which nobody uses (kit.json in the
    kit's root; scripts/tools/submission.py reads it). ``parts=None``: the full release, every module written."""
    from scripts.tools.submission import PART_MODULES

    owner = module_parts()
    present = [m for m in PART_MODULES if (ROOT / "cs336_systems" / f"{m}.py").exists()]
    if parts is None:
        return {"parts": sorted(set(owner.values())), "written": present, "given": [], "unused": [], "mixed": {}}
    given = sorted(given_modules(parts) & set(present))
    written = [m for m in present if owner.get(m) in parts or m == "accounting"]
    unused = [m for m in present if m not in written and m not in given]
    tasks = sorted({int(m["part"]) for _, m, _ in _blocks((ROOT / "reference_solutions" / "accounting.py").read_text())
                    if m is not None and m["task"]})  # fmt: skip
    mixed = {"accounting": {"write": [p for p in tasks if p in parts], "given": [p for p in tasks if p not in parts]}}
    if not mixed["accounting"]["write"]:  # no task of the kit's parts in it: given like any other module
        written.remove("accounting")
        given = sorted([*given, "accounting"])
    return {"parts": sorted(parts), "written": written, "given": given, "unused": unused, "mixed": mixed}


def ground_rules() -> str:
    """handouts/ground-rules.md for a kit without Part 1: §1.0 of handouts/01-collectives.md, which every
    part's code follows (validate on every rank before the first message, ...)."""
    text = (ROOT / "handouts" / "01-collectives.md").read_text()
    m = re.search(r"^## 1\.0 .*?(?=^## )", text, re.S | re.M)
    body = m.group(0).split("\n", 1)[1].strip() if m else ""
    return ("# Ground rules (all parts)\n\n"
            "Part 1's §1.0, which every part of this kit follows: your functions are called on every rank of a "
            "group, and a rank that raises or returns while its peers wait for its message deadlocks them.\n\n"
            f"{body}\n")  # fmt: skip


# -- which files -----------------------------------------------------------------------------------------


def _handout_images(text: str) -> set[str]:
    return {Path(m).name for m in re.findall(r"\]\((?:\./)?figures/([^)\s]+)\)", text)}


def keeps(rel: str, parts: frozenset[int]) -> bool:
    """Whether a repository file (already not staff-only for the release) belongs in the kit of ``parts``."""
    rubric = load_rubric()
    owner = module_parts()
    for part in rubric.parts.values():
        patterns = [*part.files, *part.hidden_files]
        if any(fnmatch.fnmatch(rel, pat) for pat in patterns):
            return part.number in parts
    if re.fullmatch(r"tests/test_\w+\.py", rel):  # in no part: the harness's own tests, or a part not in the rubric yet
        from scripts.grading.points import UNGRADED

        return rel in UNGRADED
    m = re.fullmatch(r"handouts/(\d\d)-[^/]+\.md", rel)
    if m:
        return int(m.group(1)) in parts
    if rel == "handouts/CHANGES.md":  # the whole kit's history, every part's files: a kit is a first copy
        return False
    if rel.startswith("handouts/figures/"):
        wanted = set()
        for handout in (ROOT / "handouts").glob("[0-9][0-9]-*.md"):
            if int(handout.name[:2]) in parts:
                wanted |= _handout_images(handout.read_text())
        linked = set().union(*(_handout_images(h.read_text()) for h in (ROOT / "handouts").glob("[0-9][0-9]-*.md")))
        return Path(rel).name in wanted or Path(rel).name not in linked
    m = re.fullmatch(r"scripts/bench/(\w+)\.py", rel)
    if m and m.group(1) in owner:
        return owner[m.group(1)] in parts
    if rel == "scripts/bench/zero.py":  # ZeRO stages 1-3's shared benchmark code
        return owner["sharded_optimizer"] in parts or owner["fsdp"] in parts
    return True


def subset_rubric(text: str, parts: frozenset[int]) -> str:
    """rubric.toml with only the tables of ``parts`` (its [parts.X...] tables and [[written]] entries)."""
    owner = module_parts()
    out, keep, pending = [], True, []
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        header = re.match(r"^\[\[?([\w.]+)\]\]?", line)
        if header:
            name = header.group(1)
            if name.startswith("parts."):
                keep = owner[name.split(".")[1]] in parts
            elif name == "written":
                block = "".join(lines[i : i + 4])
                keep = int(re.search(r"part\s*=\s*(\d+)", block).group(1)) in parts
            else:
                keep = True
            if keep:
                out += pending
            pending = []
            if keep:
                out.append(line)
            continue
        if line.startswith("#") or not line.strip():
            pending.append(line)  # comments travel with the next table kept
        elif keep:
            out += pending
            pending = []
            out.append(line)
    return "".join(out + pending)


def subset_readme(text: str, parts: frozenset[int]) -> str:
    """README.md with the parts table's rows and the "**Part N —" paragraphs of ``parts`` only."""
    out, skipping = [], False
    for line in text.splitlines(keepends=True):
        row = re.match(r"^\| (\d+) \|", line)
        if row:
            if int(row.group(1)) in parts:
                out.append(line)
            continue
        para = re.match(r"^\*\*Part (\d+) ", line)
        if para:
            skipping = int(para.group(1)) not in parts
        elif line.startswith(("#", "<!--")):
            skipping = False
        if not skipping:  # a dropped part's paragraphs, blank lines included, until the next part or heading
            out.append(line)
    return "".join(out)


GROUND_RULES = "handouts/ground-rules.md"  # §1.0 for a kit without Part 1
_RULES_LINK = re.compile(r"\((?:\.\./)?(?:handouts/)?01-collectives\.md#10-ground-rules-all-tasks\)")
_GENERATOR_NOTE = re.compile(r"^<!-- (?:written|generated) by `python -m scripts\.(?:grading|release)\.[^`]*`.*-->\n",
                             re.M)  # fmt: skip


def first_task(parts: frozenset[int]) -> tuple[str, str, str]:
    """(test file, task marker, module) of the kit's first task: the README's example commands use them."""
    rubric = load_rubric()
    part = min((p for p in rubric.parts.values() if p.number in parts), key=lambda p: (p.number, p.name))
    task = next(iter(part.tasks), f"{part.number}.1")
    files = [f for pat in part.files for f in sorted(ROOT.glob(pat))]
    main = next((f for f in files if f.stem == f"test_{part.name}"), files[0] if files else None)
    rel = main.relative_to(ROOT).as_posix() if main else f"tests/test_{part.name}.py"
    return rel, "task" + task.replace(".", "_"), part.name


def kit_readme(text: str, parts: frozenset[int], stubs: dict[str, str], manifest: dict) -> str:
    """The kit's README: its commands name the kit's own tests, task markers and benchmarks, §1.0's link goes to
    the kit's copy of the ground rules, and the Submitting section says which modules are written and which
    given. (Run on the README that subset_readme has already cut to the kit's parts.)"""
    test, marker, module = first_task(parts)
    text = re.sub(r"tests/test_collectives\.py -m task1_1", f"{test} -m {marker}", text)
    text = text.replace("tests/test_collectives.py -x", f"{test} -x")
    if 1 not in parts:
        text = _RULES_LINK.sub(f"({GROUND_RULES})", text)
    raised = re.search(r'raise NotImplementedError\("([^"]+)"\)', stubs.get(module, ""))
    if raised:
        example = r'`NotImplementedError\("Task 1\.5 \(ring all_reduce\): see handouts/01-collectives\.md §1\.5"\)`'
        text = re.sub(example, f'`NotImplementedError("{raised[1]}")`', text)
    benches = sorted(p.stem for p in (ROOT / "scripts" / "bench").glob("*.py")
                     if p.stem in module_parts() and module_parts()[p.stem] in parts)  # fmt: skip
    if benches:
        first, rest = benches[0], ", ".join(f"`.{b}`" for b in benches[1:])
        text = re.sub(r"`python -m scripts\.bench\.collectives --impl student` \(and `scripts\.bench\.ddp`,\s*`[^)]*\)",
                      f"`python -m scripts.bench.{first} --impl student`"
                      + (f" (and {rest}: one per part, named like its module)" if rest else ""), text)  # fmt: skip
    if 2 not in parts:  # the trace example runs a DDP test
        text = re.sub(r"pytest \"tests/test_ddp\.py::[^\"\n]*\" --world-sizes 2 --comm-trace /tmp/trace\n"
                      r"python -m scripts\.tools\.trace \"[^\n]*\n",
                      f"pytest {test} -m {marker} --world-sizes 2 -x --comm-trace /tmp/trace\n"
                      "python -m scripts.tools.trace /tmp/trace/<one of its files>.json\n", text)  # fmt: skip
    written = ", ".join(f"`{m}.py`" for m in manifest["written"])
    given = ", ".join(f"`{m}.py`" for m in manifest["given"]) or "none"
    note = (
        f"In this kit (parts {', '.join(map(str, manifest['parts']))}) you write {written}. Given "
        f"(the staff's code, which the kit's parts build on; not graded, do not edit): {given}."
    )
    mixed = manifest.get("mixed", {}).get("accounting")
    if mixed and mixed["given"] and mixed["write"]:  # else it is given whole, and listed as given above
        note += (f" `accounting.py` is part yours (the tasks of parts {', '.join(map(str, mixed['write']))}) and "
                 f"part given (those of parts {', '.join(map(str, mixed['given']))}).")  # fmt: skip
    unused = manifest.get("unused")
    if unused:
        note += f" The other modules ({', '.join(f'`{m}.py`' for m in unused)}) are stubs no part of this kit uses."
    at = text.find("so edits to those are not graded.")
    end = text.find("\n\n", at) if at >= 0 else -1
    if end >= 0:  # a paragraph of its own after the Submitting section's first paragraph
        text = text[:end] + "\n\n" + note + text[end:]
    return text


def kit_markdown(text: str, present: set[str], where: str = "handouts", manifest: dict | None = None) -> str:
    """A kit's handout text: §1.0's link to the kit's ground rules, links to files the kit lacks turned into plain
    text naming the part they belong to, the points generator's staff comment dropped, and a module the kit gives
    whole (``manifest["given"]``: ``accounting.py`` in a kit with none of its tasks) called given, not yours."""
    text = _GENERATOR_NOTE.sub("", text)
    for module in (manifest or {}).get("given", []):
        text = re.sub(rf"\byour `{module}\.py`", f"the given `{module}.py`", text)
    if "handouts/01-collectives.md" not in present:
        text = _RULES_LINK.sub("(ground-rules.md)" if where == "handouts" else f"({GROUND_RULES})", text)

    def unlink(m: re.Match) -> str:
        label, target = m[1], m[2]
        if re.match(r"[a-z]+:|#", target):
            return m[0]
        path = (Path(where) / target.split("#", 1)[0]).as_posix()
        path = re.sub(r"[^/]+/\.\./", "", path)
        if path in present:
            return m[0]
        part = re.match(r"(?:handouts/)?(\d\d)-", path.split("/")[-1])
        return f"{label} (Part {int(part[1])}'s handout, not in this kit)" if part else label

    text = re.sub(r"(?<!!)\[([^\]]+)\]\(([^)\s]+)\)", unlink, text)

    def unname(m: re.Match) -> str:  # a handout named in the text, not linked
        return m[0] if m[0] in present else f"Part {int(m[1])}'s handout (not in this kit)"

    return re.sub(r"(?<![\w/(])handouts/(\d\d)-[\w-]+\.md", unname, text)


# -- the dependency table's check ------------------------------------------------------------------------


def scanned_depends() -> dict[str, tuple[str, ...]]:
    """DEPENDS recomputed: the reference's imports of other part modules, and the part modules its tests load."""
    from scripts.tools.submission import PART_MODULES

    rubric = load_rubric()
    found: dict[str, set[str]] = {m: set() for m in PART_MODULES}
    for m in PART_MODULES:
        src = (ROOT / "reference_solutions" / f"{m}.py").read_text()
        for names in re.findall(r"^\s*from \. import ([\w, ]+)", src, re.M):
            found[m] |= {n.strip() for n in names.split(",")}
        found[m] |= set(re.findall(r"^\s*from reference_solutions\.(\w+) import", src, re.M))
        found[m] |= set(re.findall(r"^\s*from reference_solutions import ([\w]+)", src, re.M))
    for part in rubric.parts.values():
        for pattern in part.files:
            for path in ROOT.glob(pattern):
                text = path.read_text()
                for oracle in re.findall(r"from tests\.oracles(?:\.(\w+))? import (\w+)", text):
                    name = oracle[0] or oracle[1]
                    if (ROOT / "tests/oracles" / f"{name}.py").exists():
                        text += (ROOT / "tests/oracles" / f"{name}.py").read_text()
                if part.name in found:
                    found[part.name] |= set(re.findall(r'load\("(\w+)"\)', text))
    return {m: tuple(sorted(d & set(PART_MODULES) - {m, "accounting"})) for m, d in found.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="fail when DEPENDS differs from the code's imports")
    args = ap.parse_args(argv)
    scanned = scanned_depends()
    stated = {m: tuple(sorted(d)) for m, d in DEPENDS.items()}
    wrong = {m: (stated.get(m), d) for m, d in scanned.items() if stated.get(m) != d}
    for m, (said, got) in wrong.items():
        print(f"subset: DEPENDS[{m!r}] = {said}, but the code says {got}: update scripts/grading/subset.py")
    if not args.check or not wrong:
        for m, d in scanned.items():
            print(f"{m:>18} builds on {', '.join(d) or '-'}")
    return 1 if wrong and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
