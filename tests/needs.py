"""What a test needs beyond this checkout, told from what it launches: the markers of pyproject.toml
(`mpi`, `browser`, `postgres`) must be on every test that starts a real MPI job, Chromium or a
PostgreSQL server, so that ``scripts/test --fast`` (``-m "not mpi and not browser and ..."``) is
honest about what it leaves out.

An audit hook (PEP 578) sees every process the test process starts -- directly, through
``subprocess``, or through Playwright's driver -- and the command lines it hands to the processes it
starts (``rankmap profile -- mpirun ...``). A launcher named there counts when it resolves, on the
PATH that process gets, to a real one: the stand-ins of tests/data (fake ``mpirun`` or ``srun``
scripts) and names that are not installed (error paths) need no marker. What a grandchild launches
on its own (``rankmap bench mpi`` finding mpirun itself) is not seen: those modules carry the marker
by hand. A launch without its marker is refused at once (the test fails in a moment, not after the
job), and counted: a test that catches the refusal fails all the same.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

TESTS = Path(__file__).resolve().parent

MPI = {"mpirun", "mpiexec", "prterun", "orterun", "mpirun.openmpi", "mpiexec.openmpi", "mpiexec.hydra",
       "mpirun.mpich", "mpiexec.mpich"}
POSTGRES = {"initdb", "pg_ctl", "postgres", "pg_ctlcluster"}
BROWSER = {"chromium", "chromium-browser", "chrome", "headless_shell"}
#: fixtures that start a PostgreSQL server for the test (tests/pg.py)
PG_FIXTURES = {"pg_cluster", "own_pg_cluster"}

_seen: set[str] = set()
_marked: set[str] | None = None      # the running test's markers (None: no test runs, nothing refused)


def _words(argv) -> list[str]:
    """The words of a command line, those of ``sh -c "..."`` strings too."""
    if isinstance(argv, (str, bytes, os.PathLike)):
        argv = [argv]
    out: list[str] = []
    for a in argv or ():
        a = os.fsdecode(a) if isinstance(a, (bytes, os.PathLike)) else str(a)
        if " " in a:
            try:
                out += shlex.split(a)
            except ValueError:
                out += a.split()
        else:
            out.append(a)
    return out


def _real(word: str, env) -> bool:
    """Whether ``word`` names an installed program: not a stand-in of tests/ or one a test wrote into
    a temporary folder."""
    env = os.environ if env is None else env
    path = word if "/" in word else shutil.which(word, path=env.get("PATH", os.defpath))
    if not path or not os.path.isfile(path):
        return False
    real = Path(os.path.realpath(path))
    return not (real.is_relative_to(TESTS) or real.is_relative_to(os.path.realpath(tempfile.gettempdir())))


def classify(argv, env=None) -> set[str]:
    """The markers a launch of ``argv`` (with environment ``env``) calls for."""
    got: set[str] = set()
    words = _words(argv)
    for i, w in enumerate(words):
        name = os.path.basename(w)
        if words[i + 1:] in (["--version"], ["-V"]):     # what a launcher is (launchers.py asks), no job
            continue
        if name in MPI and _real(w, env):
            got.add("mpi")
        elif name in POSTGRES and _real(w, env):
            got.add("postgres")
        elif name in BROWSER and _real(w, env):
            got.add("browser")
    if "run-driver" in words:       # Playwright's driver, which starts the browser
        got.add("browser")
    return got


def _hook(event: str, args: tuple) -> None:
    if event == "subprocess.Popen":
        _executable, argv, _cwd, env = args
    elif event in ("os.posix_spawn", "os.exec"):
        _executable, argv, env = args
    else:
        return
    try:
        got = classify(argv, env)
    except Exception:  # noqa: BLE001 - a fault of this check must not break the launch it watches
        return
    _seen.update(got)
    if _marked is not None and got - _marked:
        # refused at once: the test fails in a moment instead of after the job it should not have run
        raise RuntimeError(f"tests/needs.py: launch of {' '.join(_words(argv)[:3])} ... refused: the test is not "
                           f"marked {', '.join(sorted(got - _marked))}")


def install() -> None:
    """Start watching this process's launches (once; audit hooks cannot be removed)."""
    if not getattr(sys, "_rankmap_needs_hook", False):
        sys.addaudithook(_hook)
        sys._rankmap_needs_hook = True  # type: ignore[attr-defined]


def reset(marked: set[str] | None = None) -> None:
    """A test starts (its markers ``marked``): what it launches is counted from now, and refused where
    its marker is missing."""
    global _marked
    _seen.clear()
    _marked = marked


def note(marker: str) -> None:
    """The test uses what ``marker`` stands for (a server started for an earlier test, say)."""
    _seen.add(marker)


def missing(marked: set[str]) -> set[str]:
    """What was launched since :func:`reset` without its marker in ``marked``."""
    return _seen - marked
