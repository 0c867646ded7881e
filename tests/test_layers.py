"""Imports only point down the layer list of docs/architecture.md (function-level imports too)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "rankmap"
ARCH = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"

#: bottom to top; folders on one line are siblings that must not import each other
LAYERS = [("errors",), ("native_sources",), ("formats",), ("topology",), ("capture",), ("store",),
          ("mapping", "report", "bench"), ("pipeline",), ("web",), ("commands",), ("cli",), ("__main__",)]
#: the one import up the list: the topology JSON's objects are the topology model's (a module that
#: imports nothing of rankmap but its errors)
ALLOWED_UP = {("rankmap.formats.topology_json", "rankmap.topology.model")}


def level(part: str) -> int:
    for i, names in enumerate(LAYERS):
        if part in names:
            return i
    raise AssertionError(f"rankmap.{part} is in no layer of this test (and docs/architecture.md)")


def modules() -> list[tuple[str, Path]]:
    out = []
    for p in sorted(SRC.rglob("*.py")):
        rel = p.relative_to(SRC.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        out.append((".".join(parts), p))
    return out


def imports_of(path: Path, module: str) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            base = node.module
            if node.level:
                pkg = module.split(".")[:len(module.split(".")) - node.level + (path.name == "__init__.py")]
                base = ".".join(pkg + [node.module])
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}
    return {f for f in found if f.startswith("rankmap.") and f != "rankmap"}


@pytest.mark.parametrize("module,path", modules(), ids=[m for m, _ in modules()])
def test_imports_point_down(module, path):
    parts = module.split(".")
    if len(parts) < 2:
        return
    mine = level(parts[1])
    known = {m for m, _ in modules()}
    for target in sorted(imports_of(path, module)):
        if target not in known:           # ``from rankmap.x import name`` (not a module)
            continue
        theirs = level(target.split(".")[1])
        if (module, target) in ALLOWED_UP:
            continue
        assert theirs < mine or target.split(".")[1] == parts[1], f"{module} imports {target} (up the layer list)"


def test_architecture_lists_every_layer():
    text = ARCH.read_text()
    for names in LAYERS[2:-2]:
        for n in names:
            assert f"src/rankmap/{n}/" in text, n
