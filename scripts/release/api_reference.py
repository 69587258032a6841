"""handouts/api.md, the students' API reference, rendered from the stub docstrings of cs336_systems/.

    python -m scripts.release.stubs            # writes the stubs, then handouts/api.md through render()

The stubs' docstrings are the specification; this file only collects them, one section per part
module, in handout order: each public function and class with its signature and docstring (a class's
public methods below it). The docstrings are written once, in reference_solutions/, and the stub
generator (scripts/release/stubs.py) copies them into the stubs and calls ``render`` on the result.
"""

from __future__ import annotations

import ast
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
        "<!-- written by `python -m scripts.release.stubs` from the docstrings in cs336_systems/; edit those -->",
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
