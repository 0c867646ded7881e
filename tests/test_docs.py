"""What the docs name exists: the README's verb table is `cli.VERBS`, every `rankmap VERB --option`
the README and docs/*.md show is an option of that verb, every repository path they name exists
(and the options they pass to bench/ and gpu/ scripts), and docs/architecture.md names every
module and C source there is and nothing that is not.

A doc that drifts from the code misleads a user before any test of the code can; these keep them in step.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from rankmap import cli

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
ARCH = ROOT / "docs" / "architecture.md"
DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]


# ---------------------------------------------------------------------- the verb table
def table_verbs(text: str) -> list[str]:
    """The verbs of the README's `| verb | what you get |` table, in its order."""
    rows = text.split("| verb | what you get |", 1)[1].split("\n\n", 1)[0].splitlines()[2:]
    return [v for row in rows for v in re.findall(r"`rankmap (\w+)", row.split("|")[1])]


def test_table_verbs_parse():
    text = "x\n| verb | what you get |\n| --- | --- |\n| `rankmap a X` | y |\n| `rankmap b` / `rankmap c` | z |\n\nrest"
    assert table_verbs(text) == ["a", "b", "c"]


def test_readme_verb_table_is_cli_verbs():
    assert table_verbs(README.read_text()) == cli.VERBS


def test_help_lists_every_verb():
    helps = {name: action.help for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction)
             for action in a._choices_actions for name in [action.dest]}
    assert list(helps) == cli.VERBS
    assert all(h and "\n" not in h for h in helps.values()), helps


# ---------------------------------------------------------------------- options shown in the docs
def parsers() -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """Every (sub-)command's parser: ("map",) -> ..., ("bench", "p2p") -> ..."""
    out: dict[tuple[str, ...], argparse.ArgumentParser] = {}

    def walk(p: argparse.ArgumentParser, path: tuple[str, ...]) -> None:
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sp in a.choices.items():
                    out[path + (name,)] = sp
                    walk(sp, path + (name,))
    walk(cli.build_parser(), ())
    return out


def options(p: argparse.ArgumentParser) -> set[str]:
    return {o for a in p._actions for o in a.option_strings}


def shown_options(text: str, known: dict[tuple[str, ...], argparse.ArgumentParser]) -> list[tuple[str, str]]:
    """(command, option) of every `rankmap VERB [SUB] ... --option` on one line of text that the
    verb does not have. Prose such as "rankmap keeps ..." names no verb and is skipped; options
    after ` -- ` belong to the launched command, and a `#` comment, `&&` or the next `rankmap` ends
    the command. A verb with sub-commands named without one
    (`rankmap bench --format json`) may show the options of any of them."""
    bad = []
    for line in text.splitlines():
        for m in re.finditer(r"rankmap (\w+)((?: \w+)?)([^`|\n]*)", line):
            verb, sub, rest = m.group(1), m.group(2).strip(), re.split(r" -- | #|&&|;|\brankmap ", m.group(3))[0]
            if (verb,) not in known:
                continue
            subs = [k for k in known if len(k) == 2 and k[0] == verb]
            if (verb, sub) in known:
                allowed = options(known[(verb, sub)])
            else:
                rest = f"{sub} {rest}"
                allowed = options(known[(verb,)]).union(*(options(known[k]) for k in subs))
            for opt in re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", rest):
                if opt not in allowed:
                    bad.append((f"rankmap {verb} {sub}".strip(), opt))
    return bad


def test_shown_options_catch_a_wrong_one():
    known = parsers()
    assert shown_options("`rankmap map --traffic t.csv --topology x -- mpirun -np 2`", known) == []
    assert shown_options("`rankmap map --trafic t.csv`", known) == [("rankmap map", "--trafic")]
    assert shown_options("`rankmap bench p2p --size 1M`; rankmap keeps --nothing", known) == []
    assert shown_options("`rankmap bench mpi --size 1M`", known) == [("rankmap bench mpi", "--size")]
    assert shown_options("rankmap topo --measured   rankmap map --traffic t.csv  # not -g", known) == []


def test_docs_show_only_existing_options():
    known = parsers()
    bad = {f"{d.relative_to(ROOT)}: {cmd} {opt}" for d in DOCS for cmd, opt in shown_options(d.read_text(), known)}
    assert bad == set()


# ---------------------------------------------------------------------- paths and script options
PATH_RE = re.compile(r"(?<![\w/.~-])((?:src/rankmap|native|tests|bench|gpu|examples|docs|scripts)/[\w./-]*\w)(?!\w|\.\{)")


def named_paths(text: str) -> set[str]:
    """Repository paths a doc names (build outputs, `.../build/...`, are made by the commands shown)."""
    return {p for p in PATH_RE.findall(text) if "/build/" not in p}


def test_named_paths_parse():
    text = "`native/common/rmrec.{h,c}`, `bench/x.py`. Not /api/bench/RUN nor examples/mpi/build/halo4d"
    assert named_paths(text) == {"native/common", "bench/x.py"}


def test_docs_name_only_paths_that_exist():
    missing = {f"{d.relative_to(ROOT)}: {p}" for d in DOCS for p in named_paths(d.read_text())
               if not (ROOT / p).exists() and not (SRC / p).exists()}
    assert missing == set()


def script_options(text: str) -> list[tuple[str, str]]:
    """(script, option) for every `bench/X.py --opt` / `gpu/X.sh --opt` on a line whose script does
    not mention that option (its argparse or its shell case), up to a comment or the next command."""
    out = []
    for line in text.splitlines():
        for m in re.finditer(r"(?<![\w/])((?:bench|gpu|scripts)/[\w.-]+\.(?:py|sh))([^`|\n]*)", line):
            script = ROOT / m.group(1)
            if not script.is_file():
                continue
            rest = re.split(r"\s#|;|&&|\)|,\s", m.group(2))[0]
            out += [(m.group(1), o) for o in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", rest)
                    if o not in script.read_text()]
    return out


def test_script_options_catch_a_wrong_one():
    assert script_options("`PYTHONPATH=src python3 bench/ingest.py --minutes 60 --cycles 10`") == []
    assert script_options("`python3 bench/ingest.py --minutez 1  # not --other`") == [("bench/ingest.py", "--minutez")]


def test_docs_show_only_existing_script_options():
    bad = {f"{d.relative_to(ROOT)}: {s} {o}" for d in DOCS for s, o in script_options(d.read_text())}
    assert bad == set()


# ---------------------------------------------------------------------- architecture.md's module list
SRC = ROOT / "src" / "rankmap"
NATIVE = ROOT / "native"
SOURCE_SUFFIXES = {".py", ".c", ".cu", ".spec", ".js"}


def named_files(text: str) -> set[str]:
    """File names and paths in backticks or a layer line (`x/y.py`, `rmrec.{h,c}` -> rmrec.h, rmrec.c)."""
    out = set()
    for name in re.findall(r"[\w./-]*\w(?:\.\{[\w,]+\}|\.(?:py|c|h|cu|spec|js))\b", text):
        if ".{" in name:
            stem, exts = name.split(".{")
            out |= {f"{stem}.{e}" for e in exts.rstrip("}").split(",")}
        else:
            out.add(name)
    return out


def exists(name: str) -> bool:
    """A path from the repository root or from src/rankmap, or a bare file name somewhere below
    src/rankmap, native/ or examples/."""
    if "/" in name or (ROOT / name).is_file():
        return (ROOT / name).is_file() or (SRC / name).is_file()
    return any(any(base.rglob(name)) for base in (SRC, NATIVE, ROOT / "examples"))


def test_architecture_names_only_files_that_exist():
    missing = sorted(n for n in named_files(ARCH.read_text()) if not exists(n))
    assert missing == []


def test_architecture_names_every_module_and_c_source():
    """A module counts as named by its path, its file name, or its bare name in backticks in a list
    after its folder (`mapping/` (`inputs`, `traffic`, ...))."""
    text = ARCH.read_text()
    named = {Path(n).name for n in named_files(text)}
    files = [p for p in SRC.rglob("*") if p.suffix in SOURCE_SUFFIXES and p.name != "__init__.py"]
    files += [p for p in NATIVE.rglob("*") if p.suffix in SOURCE_SUFFIXES]
    unnamed = sorted(str(p.relative_to(ROOT)) for p in files
                     if p.name not in named and f"`{p.stem}`" not in text)
    assert unnamed == []
