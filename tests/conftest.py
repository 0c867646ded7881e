"""Shared test helpers: run the real `rankmap` command as a user would."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

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
    lines = [l for l in p.stderr.splitlines() if l.strip()]
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
