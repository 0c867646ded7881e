"""Imports only point down the layer list of docs/architecture.md (function-level imports too)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "rankmap"
ARCH = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"


def doc_layers(text: str) -> list[tuple[str, ...]]:
    """The layer list of docs/architecture.md, bottom to top: a numbered line starts a layer, an
    unnumbered ``src/rankmap/...`` line below it adds a sibling. The doc is the one place it is declared."""
    block = text.split("```")[1]
    layers: list[list[str]] = []
    for line in block.splitlines():
        m = re.match(r"\s*(\d+)?\s+src/rankmap/(\w+)(?:/|\.py)\s", line + " ")
        if not m:
            continue
        if m.group(1) is not None:
            layers.append([])
        layers[-1].append(m.group(2))
    return [tuple(names) for names in reversed(layers)]


#: bottom to top; folders of one layer are siblings that must not import each other
LAYERS = doc_layers(ARCH.read_text())
#: the one import up the list: the topology JSON's objects are the topology model's (a module that
#: imports nothing of rankmap but its errors)
ALLOWED_UP = {("rankmap.formats.topology_json", "rankmap.topology.model")}


def level(part: str) -> int:
    for i, names in enumerate(LAYERS):
        if part in names:
            return i
    raise AssertionError(f"rankmap.{part} is in no layer of docs/architecture.md")


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


def test_doc_layers_parse():
    """The parser reads numbered lines as layers and unnumbered ones as siblings (and is not vacuous)."""
    text = "x\n```\n 2  src/rankmap/b/   B\n    src/rankmap/c/   C\n              prose src/rankmap/z/\n" \
           " 1  src/rankmap/a.py   A\n```\n"
    assert doc_layers(text) == [("a",), ("b", "c")]
    assert ("errors",) == LAYERS[0] and ("mapping", "report", "linkbench", "nodes") in LAYERS and len(LAYERS) >= 10


def test_every_package_part_has_a_layer():
    """Every module and folder of src/rankmap sits on the doc's layer list."""
    tops = {m.split(".")[1] for m, _ in modules() if "." in m}
    listed = {n for names in LAYERS for n in names}
    assert tops - listed == set(), "in no layer of docs/architecture.md"
    assert listed - tops == set(), "listed in docs/architecture.md but not in src/rankmap"


def test_what_comes_out_of_a_job_sits_above_what_goes_in():
    """capture/ holds what goes into a job; pairs/ (rank pairs from its records) and counters/ (the
    link counters sampled beside it) read what comes out. They sit beside store/, one layer above
    capture/, so the import check above keeps capture/ from importing them, and them and store/
    from importing each other."""
    assert level("pairs") == level("counters") == level("store") == level("capture") + 1


# ---------------------------------------------------------------------- one module per verb
COMMANDS = "rankmap.commands."


def verb_modules() -> dict[str, Path]:
    """The verb modules of commands/: every one but the shared ones (``_args``: options of several verbs)."""
    return {m: p for m, p in modules() if m.startswith(COMMANDS) and not m[len(COMMANDS):].startswith("_")}


def other_verbs_imported(module: str, path: Path, verbs: set[str]) -> list[str]:
    return sorted(t for t in imports_of(path, module) if t in verbs and t != module)


def test_verb_modules_are_the_cli_verbs():
    """commands/ holds the verbs of cli.VERBS and the modules they share, nothing else."""
    from rankmap import cli

    assert {m[len(COMMANDS):] for m in verb_modules()} == set(cli.VERBS)


def test_a_verb_module_imports_no_other_verb(tmp_path):
    """A verb's logic is found in its own module and the pipeline it calls: what verbs share lives in
    a shared module (commands/_args.py) or below, never in another verb's module."""
    verbs = set(verb_modules())
    probe = tmp_path / "probe.py"
    probe.write_text("from rankmap.commands import map\nfrom rankmap.commands._args import launch_command\n"
                     "def f():\n    import rankmap.commands.tune\n")
    assert other_verbs_imported("rankmap.commands.run", probe, verbs) == ["rankmap.commands.map",
                                                                          "rankmap.commands.tune"]
    bad = {m: other_verbs_imported(m, p, verbs) for m, p in verb_modules().items()}
    assert {m: b for m, b in bad.items() if b} == {}
