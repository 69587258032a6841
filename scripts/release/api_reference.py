"""Write handouts/api.md, the students' API reference, from the stub docstrings of cs336_systems/.

    python -m scripts.release.api_reference            # rewrite handouts/api.md
    python -m scripts.release.api_reference --check    # CI: fail if handouts/api.md is not current

The stubs' docstrings are the specification; this file only collects them, one section per part
module, in handout order: each public function and class with its signature and docstring (a class's
public methods below it). Edit the docstrings, then rerun this script.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

from scripts.tools.submission import PART_MODULES

ROOT = Path(__file__).resolve().parents[2]

OUT = ROOT / "handouts" / "api.md"


def signature(node) -> str:
    if isinstance(node, ast.ClassDef):
        bases = ", ".join(ast.unparse(b) for b in node.bases)
        return f"class {node.name}({bases})" if bases else f"class {node.name}"
    returns = f" -> {ast.unparse(node.returns)}" if node.returns else ""
    return f"def {node.name}({ast.unparse(node.args)}){returns}"


def section(node, level: int) -> list[str]:
    doc = ast.get_docstring(node) or "(no docstring)"
    lines = [f"{'#' * level} `{node.name}`", "", "```python", signature(node), "```", "", doc, ""]
    if isinstance(node, ast.ClassDef):
        for child in node.body:
            public = not child.name.startswith("_") or child.name == "__init__" if hasattr(child, "name") else False
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) and public:
                lines += section(child, level + 1)
    return lines


def render(sources: dict[str, str] | None = None) -> str:
    """The API reference of the part modules: from ``sources`` (module -> stub source), else the stubs on disk."""
    lines = [
        "# API reference",
        "",
        "<!-- written by `python -m scripts.release.api_reference` from the docstrings in cs336_systems/; "
        "edit those -->",
        "",
        "Every function and class you implement, with its signature and the docstring that specifies it",
        "(the same text as in `cs336_systems/`). The handouts explain why; this is what.",
        "",
    ]
    for module in PART_MODULES:
        source = sources[module] if sources else (ROOT / "cs336_systems" / f"{module}.py").read_text()
        tree = ast.parse(source)
        lines += [f"## `cs336_systems/{module}.py`", "", ast.get_docstring(tree) or "", ""]
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not node.name.startswith(
                "_"
            ):
                lines += section(node, 3)
    return "\n".join(lines).rstrip() + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="fail if handouts/api.md is not current")
    args = parser.parse_args()
    text = render()
    if args.check:
        if not OUT.exists() or OUT.read_text() != text:
            print("handouts/api.md is stale: run python -m scripts.release.api_reference", file=sys.stderr)
            return 1
        print("handouts/api.md is current")
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(ROOT)} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
