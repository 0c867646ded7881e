"""The verbs that only read from the store (jobs, show, export, map --job, bench show, --measured,
run's stored mapping) never make one: a path given with --db or RANKMAP_DB that holds no store is one
line naming it, and nothing is left behind. The default store is made on first use."""

from __future__ import annotations

import pytest

from conftest import assert_one_line_error, cli

READERS = [
    ("show", "1"), ("export", "1"), ("map", "--job", "1", "--topology", "dgx1-v100"),
    ("bench", "show"), ("topo", "--fixture", "dgx1-v100", "--measured"),
    ("map", "--traffic", "{csv}", "--topology", "dgx1-v100", "--measured"),
    ("jobs",), ("jobs", "--format", "json"),     # jobs made an empty store there, and said it had no jobs
    ("run", "--topology", "dgx1-v100", "--", "mpirun", "-np", "2", "./app"),
]


@pytest.mark.parametrize("verb", READERS, ids=lambda v: " ".join(v[:2]))
def test_a_mistyped_store_is_said_and_not_made(verb, tmp_path):
    csv = tmp_path / "t.csv"
    csv.write_text("src,dst,class,operation,bytes,messages\n0,1,p2p,MPI_Send,100,1\n")
    args = [a.replace("{csv}", str(csv)) for a in verb]
    typo = tmp_path / "no" / "such" / "rankmap.db"
    home = {"RANKMAP_HOME": str(tmp_path / "home")}
    at = args.index("--") if "--" in args else len(args)        # before run's command
    p = cli(*args[:at], "--db", f"sqlite:///{typo}", *args[at:], env=home)
    assert_one_line_error(p, f"no rankmap store at {typo}")
    assert not (tmp_path / "no").exists()
    p = cli(*args, env=dict(home, RANKMAP_DB=f"sqlite:///{typo}"))
    assert_one_line_error(p, f"no rankmap store at {typo}")
    assert not (tmp_path / "no").exists()


def test_the_default_store_is_still_made_on_first_use(tmp_path):
    p = cli("export", "latest", env={"RANKMAP_HOME": str(tmp_path / "home")})
    assert_one_line_error(p, "no jobs")
    assert (tmp_path / "home" / "rankmap.db").exists()


def test_jobs_of_the_default_store_before_any_job(tmp_path):
    home = tmp_path / "home"
    p = cli("jobs", env={"RANKMAP_HOME": str(home)})
    assert (p.returncode, p.stdout, p.stderr) == (0, f"no jobs in sqlite:///{home / 'rankmap.db'} yet: run "
                                                     f"`rankmap profile -- <command>` first\n", "")
