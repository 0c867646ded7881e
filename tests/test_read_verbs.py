"""The verbs that only read a job or a run from the store (show, export, map --job, bench show,
--measured) never make one: a path given with --db or RANKMAP_DB that holds no store is one line
naming it, and nothing is left behind. (`rankmap jobs` of such a path says there are no jobs there
yet, with its URL.)"""

from __future__ import annotations

import pytest

from conftest import assert_one_line_error, rankmap

READERS = [
    ("show", "1"), ("export", "1"), ("map", "--job", "1", "--topology", "dgx1-v100"),
    ("bench", "show"), ("topo", "--fixture", "dgx1-v100", "--measured"),
    ("map", "--traffic", "{csv}", "--topology", "dgx1-v100", "--measured"),
]


@pytest.mark.parametrize("verb", READERS, ids=lambda v: " ".join(v[:2]))
def test_a_mistyped_store_is_said_and_not_made(verb, tmp_path):
    csv = tmp_path / "t.csv"
    csv.write_text("src,dst,class,operation,bytes,messages\n0,1,p2p,MPI_Send,100,1\n")
    args = [a.replace("{csv}", str(csv)) for a in verb]
    typo = tmp_path / "no" / "such" / "rankmap.db"
    home = {"RANKMAP_HOME": str(tmp_path / "home")}
    p = rankmap(*args, "--db", f"sqlite:///{typo}", env=home)
    assert_one_line_error(p, f"no rankmap store at {typo}")
    assert not (tmp_path / "no").exists()
    p = rankmap(*args, env=dict(home, RANKMAP_DB=f"sqlite:///{typo}"))
    assert_one_line_error(p, f"no rankmap store at {typo}")
    assert not (tmp_path / "no").exists()


def test_the_default_store_is_still_made_on_first_use(tmp_path):
    p = rankmap("export", "latest", env={"RANKMAP_HOME": str(tmp_path / "home")})
    assert_one_line_error(p, "no jobs")
    assert (tmp_path / "home" / "rankmap.db").exists()
