"""Counts in messages read as English: "1 rank", "2 ranks", never "rank(s)" or "1 ranks".

``counted`` (in ``errors.py``, the bottom layer, so that every layer can word its messages with
it) is the one place that decides; a scan of the sources keeps "(s)" out of the strings.
"""

from __future__ import annotations

import io
import json
import re
import tokenize
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from conftest import ROOT, assert_one_line_error, rankmap
from rankmap.errors import RankmapError, counted, verb
from rankmap.mapping import execwrap, launch
from rankmap.mapping.problem import NodeProblem
from rankmap.mapping.solve import check_fit
from test_execwrap import fake_doc

PLURAL_GUESS = re.compile(r"[A-Za-z]\((s|es)\)")


def test_counted():
    assert counted(1, "rank") == "1 rank"
    assert counted(0, "rank") == "0 ranks"
    assert counted(2, "GPU rank") == "2 GPU ranks"
    assert counted("?", "node") == "? nodes"


def test_verb():
    assert [verb(k, "does", "do") for k in (0, 1, 2, "?")] == ["do", "does", "do", "do"]
    assert verb(1, "is", "are") == "is" and verb(3, "is", "are") == "are"


def _strings_with_guesses(path: Path) -> list[str]:
    if path.suffix == ".py":
        toks = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
        texts = [(t.start[0], t.string) for t in toks if t.type == tokenize.STRING or
                 t.type == getattr(tokenize, "FSTRING_MIDDLE", -1)]
    else:   # JavaScript: its template and quoted strings, well enough for this check
        texts = [(i + 1, m.group(0)) for i, line in enumerate(path.read_text().splitlines())
                 for m in re.finditer(r"`[^`]*`|\"[^\"]*\"|'[^']*'", line)]
    return [f"{path.relative_to(ROOT)}:{n}: {s.strip()[:80]}" for n, s in texts
            if PLURAL_GUESS.search(s) and "(s)\"" not in s and " (s)" not in s]


def test_no_plural_guesses_in_messages():
    """'rank(s)' makes the reader do the counting: say '1 rank' or '2 ranks' (``counted``)."""
    src = ROOT / "src" / "rankmap"
    found = [hit for p in sorted([*src.rglob("*.py"), *(src / "web" / "static").glob("*.js")])
             for hit in _strings_with_guesses(p)]
    assert found == []


def test_fit_messages_count_properly():
    with pytest.raises(RankmapError) as e:
        check_fit(3, SimpleNamespace(nodes=1, G=2), 1)
    assert "3 ranks do not fit on 1 node x 2 GPUs with 1 rank per GPU" in str(e.value)
    with pytest.raises(RankmapError) as e:
        check_fit(9, SimpleNamespace(nodes=2, G=1), 4)
    assert "on 2 nodes x 1 GPU with 4 ranks per GPU" in str(e.value)
    with pytest.raises(RankmapError) as e:
        NodeProblem(SimpleNamespace(G=1), np.zeros((2, 2)), np.zeros(2), np.zeros(2), K=1)
    assert "2 ranks do not fit on 1 GPU with 1 rank per GPU" in str(e.value)


def test_host_name_messages_count_properly(monkeypatch):
    for var in ("SLURM_JOB_NODELIST", "SLURM_NODELIST"):
        monkeypatch.delenv(var, raising=False)
    for nodes, given, known in ((2, "h1", "1 host name is known"), (3, "h1,h2", "2 host names are known"),
                                (2, None, "0 host names are known")):
        with pytest.raises(RankmapError) as e:
            launch.hosts_for(SimpleNamespace(nodes=nodes), given)
        assert f"the mapping spans {nodes} nodes but {known}: pass --hosts" in str(e.value)


def test_execwrap_counts_properly():
    one = fake_doc(1)
    with pytest.raises(LookupError, match=r"the mapping has no rank 3 \(it places 1 rank\)$"):
        execwrap.plan(one, {"OMPI_COMM_WORLD_RANK": "3"})
    with pytest.raises(LookupError, match=r"the job has 2 workers but the mapping places 1 rank$"):
        execwrap.plan(one, {"RANKMAP_LAUNCHER": "torchrun", "GROUP_RANK": "0", "LOCAL_RANK": "0",
                            "WORLD_SIZE": "2"})
    with pytest.raises(LookupError, match=r"places 1 rank there: give this node --nproc-per-node 1$"):
        execwrap.plan(one, {"RANKMAP_LAUNCHER": "torchrun", "GROUP_RANK": "0", "LOCAL_RANK": "0",
                            "LOCAL_WORLD_SIZE": "2"})
    with pytest.raises(LookupError, match=r"the mapping places 1 rank on node 0, not a local rank 1$"):
        execwrap.plan(one, {"RANKMAP_LAUNCHER": "torchrun", "GROUP_RANK": "0", "LOCAL_RANK": "1"})


@pytest.mark.mpi
def test_run_counts_properly(tmp_path):
    m = tmp_path / "one.json"
    m.write_text(json.dumps(fake_doc(1)))
    env = {"RANKMAP_HOME": str(tmp_path), "RANKMAP_DB": f"sqlite:///{tmp_path / 'r.db'}"}
    p = rankmap("run", "--mapping", str(m), "--topology", "dgx1-v100", "--", "mpirun", "-np", "2", "/bin/true",
                env=env)
    assert_one_line_error(p, f"mapping {m} places 1 rank but the command starts 2")
