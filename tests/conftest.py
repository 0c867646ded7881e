"""Shared test helpers: run the real `rankmap` command as a user would (`rankmap` in a subprocess,
`cli` in this process where the process boundary proves nothing), and the checks of the markers."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import needs

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
RECORDINGS = DATA / "recordings"


def rankmap(*args: str, env: dict | None = None, cwd: str | os.PathLike | None = None,
            timeout: float = 600, input: str | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m rankmap ARGS`` in a subprocess and return the completed process (text)."""
    e = dict(os.environ)
    if env:
        e.update(env)
    return subprocess.run([sys.executable, "-m", "rankmap", *args], capture_output=True, text=True,
                          env=e, cwd=cwd, timeout=timeout, input=input)


def cli(*args: str, env: dict | None = None, cwd: str | os.PathLike | None = None,
        input: str | None = None) -> subprocess.CompletedProcess:
    """Run ``rankmap ARGS`` in this process (``rankmap.cli.main``), its stdout, stderr and exit status
    caught as :func:`rankmap` gives them, ``env`` added to the environment for the call alone.

    For what a process of its own proves nothing about -- argument parsing, tables, error lines --
    at a fraction of a subprocess's start-up. A bug's exception reaches the test as it is (where
    the command would print a traceback). Keep :func:`rankmap` where the boundary matters: exit
    statuses of launched jobs, signals, tracebacks on stderr, the environment a job gets."""
    from rankmap.cli import main

    out, err = io.StringIO(), io.StringIO()
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    saved_in = sys.stdin
    try:
        os.environ.update(env or {})
        if cwd is not None:
            os.chdir(cwd)
        sys.stdin = io.StringIO(input or "")
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as e:        # argparse's usage errors and --help, as the process would end
                if isinstance(e.code, int) or e.code is None:
                    code = e.code or 0
                else:
                    print(e.code, file=sys.stderr)
                    code = 1
    finally:
        sys.stdin = saved_in
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    return subprocess.CompletedProcess(["rankmap", *args], code, out.getvalue(), err.getvalue())


def seed_shim_cache(mpicc: str, cache: Path) -> Path:
    """``mpicc``'s MPI shim put into the build cache ``cache`` (the folder ``RANKMAP_CACHE`` names) as a
    first profile there would leave it, and its path there: built once in the usual cache and copied,
    so a test that needs a cache of its own does not compile the shim again (20-30 s of CPU). Only the
    library's folder is copied, not the usual cache's memo (which names the library by its path there)."""
    from rankmap.capture.shim_build import build_shim
    lib = build_shim(mpicc)
    shutil.copytree(lib.parent, cache / "shim" / lib.parent.name)
    return cache / "shim" / lib.parent.name / lib.name


def load_script(path: Path, name: str | None = None):
    """A script outside the package (bench/, gpu/, a test fake) imported as a module, so that tests
    can call its functions."""
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod        # what a dataclass of the script looks its module up in
    spec.loader.exec_module(mod)
    return mod


def assert_one_line_error(p: subprocess.CompletedProcess, *needles: str) -> None:
    """Bad input must give a non-zero exit and one clear line, never a traceback."""
    assert p.returncode != 0, p.stdout + p.stderr
    assert "Traceback" not in p.stderr, p.stderr
    # a first use builds the shim and says so; that notice is not part of the error
    lines = [l for l in p.stderr.splitlines() if l.strip() and not l.startswith("rankmap: building ")]
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("rankmap: error:"), lines[0]
    for n in needles:
        assert n in lines[0], (n, lines[0])


@pytest.fixture(scope="session", autouse=True)
def _mpi_shared_memory_left_behind():
    """Ranks killed or crashed on purpose leave MPI's shared-memory segments in /dev/shm (Open MPI's
    4 MiB vader_segment.* files, about 160 of them a suite): remove those of jobs that are gone."""
    import mpi_shm

    before = mpi_shm.segments()
    yield
    mpi_shm.remove_orphans(before)


@pytest.fixture
def recordings() -> Path:
    """Raw outputs of real machines (tests/data/recordings/README.md says which)."""
    return RECORDINGS


# -- markers: what a test needs, checked ---------------------------------------------------------

needs.install()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Timing tests share one xdist group: one worker runs them one at a time (two side by side would
    time each other). The slow tests go first: the workers take tests in this order, and a test of
    half a minute handed out last holds the whole suite for it after the others are done (on 2 cores
    with 4 workers the last 5 % of the tests took 2.5 of 9.7 minutes). The order is the same in every
    worker (a stable sort), as xdist requires."""
    for item in items:
        if item.get_closest_marker("timing"):
            item.add_marker(pytest.mark.xdist_group("timing"))
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    needs.reset({m.name for m in item.iter_markers()})
    if needs.PG_FIXTURES & set(getattr(item, "fixturenames", ())) and not item.get_closest_marker("postgres"):
        pytest.fail("asks for a PostgreSQL server (tests/pg.py) but is not marked so (add pytest.mark.postgres)",
                    pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """A test that launched a real MPI job, Chromium or PostgreSQL (setup included) without its marker
    fails, naming the marker: scripts/test --fast would have run it."""
    try:
        res = yield
    finally:
        want = needs.missing({m.name for m in item.iter_markers()})
        needs.reset()
    if want:
        pytest.fail(f"started what the marker(s) {', '.join(sorted(want))} stand for, without them "
                    f"(add pytest.mark.{sorted(want)[0]})", pytrace=False)
    return res
