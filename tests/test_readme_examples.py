"""The README's examples, run as written on a machine as a new user has it: a home of its own (no
store, no built hooks), no rankmap or MPI variables set, `rankmap` on the PATH, this machine's cores.

The first block claims to need nothing but MPI and a C compiler: every line must exit 0 and do what
it says (its last line, `rankmap serve`, must serve the jobs the others stored). The GPU block, on a
machine without an NVIDIA driver, must stop each line with one line saying what is missing, never a
traceback. The root block changes the machine's network and is left to tests/test_nodes.py.

Before these were run, 3 of the README's 12 example lines worked on a 2-core machine without a GPU:
Open MPI refused 8 ranks on 2 cores (and root), `tune`, `run` and `map` looked for a GPU.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent          # where `rankmap` is, as `source .venv/bin/activate` puts it

pytestmark = [pytest.mark.mpi, pytest.mark.slow]


def blocks(text: str) -> list[list[str]]:
    """The lines of each ```sh block of the README's Examples section, in order."""
    section = text.split("\n## Examples\n", 1)[1].split("\n## ", 1)[0]
    return [b.strip("\n").splitlines() for b in re.findall(r"```sh\n(.*?)```", section, re.S)]


def commands(block: list[str]) -> list[str]:
    return [l for l in block if l.strip() and not l.lstrip().startswith("#")]


def test_blocks_parse():
    text = "# x\n## Examples\n\nnone\n```sh\n# c\na  # b\n\nb\n```\nok\n```sh\nc\n```\n## Next\n```sh\nd\n```\n"
    assert blocks(text) == [["# c", "a  # b", "", "b"], ["c"]]
    assert commands(blocks(text)[0]) == ["a  # b", "b"]


EXAMPLES = blocks((ROOT / "README.md").read_text())


def fresh_env(home: Path) -> dict[str, str]:
    """This process's environment as a new user's shell would have it: their own empty home."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RANKMAP_", "OMPI_", "PRTE_", "PMIX_", "XDG_"))}
    env.update(HOME=str(home), PATH=f"{BIN}{os.pathsep}{env.get('PATH', os.defpath)}")
    return env


def has_gpu() -> bool:
    import ctypes.util

    return ctypes.util.find_library("nvidia-ml") is not None or Path("/dev/nvidia0").exists()


@pytest.fixture(scope="module")
def machine(tmp_path_factory):
    """A checkout's examples in a fresh directory, and the environment of a fresh home."""
    if shutil.which("mpicc") is None or shutil.which("mpirun") is None:
        pytest.skip("no MPI here (scripts/bootstrap installs Open MPI)")
    work = tmp_path_factory.mktemp("readme")
    shutil.copytree(ROOT / "examples", work / "examples", ignore=shutil.ignore_patterns("build", "__pycache__"))
    (work / "home").mkdir()
    return work, fresh_env(work / "home")


def run_block(lines: list[str], work: Path, env: dict, stop_at_failure: bool) -> list[dict]:
    """Run the block's lines in one bash, in order (its exports hold for the lines after them);
    each line's exit status, stdout and stderr."""
    out = work / ".lines"
    out.mkdir(exist_ok=True)
    script = []
    for i, line in enumerate(lines):
        script.append(f"{{ {line}\n}} >{out}/{i}.out 2>{out}/{i}.err; rc=$?; echo $rc >{out}/{i}.rc")
        if stop_at_failure:
            script.append("[ $rc = 0 ] || exit $rc")
    subprocess.run(["bash", "-c", "\n".join(script)], cwd=work, env=env, timeout=1200)
    got = []
    for i, line in enumerate(lines):
        rc = out / f"{i}.rc"
        got.append({"line": line, "rc": int(rc.read_text()) if rc.exists() else None,
                    "out": (out / f"{i}.out").read_text() if rc.exists() else "",
                    "err": (out / f"{i}.err").read_text() if rc.exists() else ""})
        if rc.exists():
            for f in ("out", "err", "rc"):
                (out / f"{i}.{f}").unlink()
    return got


def test_the_readme_has_its_blocks():
    assert len(EXAMPLES) == 3, EXAMPLES
    assert commands(EXAMPLES[0])[-1].startswith("rankmap serve ")
    assert any(l.startswith("sudo scripts/nodes up") for l in commands(EXAMPLES[2]))


@pytest.fixture(scope="module")
def first_block(machine):
    work, env = machine
    lines = commands(EXAMPLES[0])
    return run_block(lines[:-1], work, env, stop_at_failure=True), lines[-1]


def test_the_first_block_runs_as_written_without_a_gpu(first_block, machine):
    work, env = machine
    got, _ = first_block
    for g in got:
        assert g["rc"] == 0, g
        assert "Traceback" not in g["err"] and "warning" not in g["out"] + g["err"], g
    said = {g["line"].split("#")[0].strip(): g for g in got}
    profiled = next(g for k, g in said.items() if k.startswith("rankmap profile"))
    assert "8 of 8 ranks reported" in profiled["out"] and "exit status 0" in profiled["out"], profiled
    csv = (work / "traffic.csv").read_text().splitlines()
    assert csv[0].startswith("src,dst,class,operation") and len(csv) > 8, csv[:3]
    tuned = next(g for k, g in said.items() if k.startswith("rankmap tune"))
    assert "stored as mapping 1" in tuned["out"], tuned
    ran = next(g for k, g in said.items() if k.startswith("rankmap run"))
    assert "halo4d: dims 2 2 2 1" in ran["out"], ran
    jobs = subprocess.run([str(BIN / "rankmap"), "jobs", "--format", "json"], capture_output=True, text=True,
                          cwd=work, env=env, timeout=120)
    assert [(j["state"], j["ranks"]) for j in json.loads(jobs.stdout)] == [("finished", 8)], jobs.stdout


def test_the_first_blocks_server_serves_the_jobs(first_block, machine):
    """`rankmap serve  # then open http://127.0.0.1:8000`: the page and the stored job answer there."""
    work, env = machine
    _, line = first_block
    url = re.search(r"http://[\w.:]+", line).group(0)
    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", int(url.rsplit(":", 1)[1]))) == 0:
            pytest.skip(f"something on this machine already listens at {url}")
    p = subprocess.Popen(["bash", "-c", f"exec {line}"], cwd=work, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline, jobs = time.monotonic() + 120, None
        while time.monotonic() < deadline and p.poll() is None:
            try:
                with urllib.request.urlopen(f"{url}/api/jobs", timeout=10) as r:
                    jobs = json.load(r)
                break
            except OSError:
                time.sleep(0.5)
        assert jobs is not None, p.stdout.read() if p.poll() is not None else "no answer"
        assert [j["world_size"] for j in jobs["jobs"]] == [8], jobs
        with urllib.request.urlopen(url, timeout=10) as r:
            assert r.status == 200 and "<html" in r.read().decode().lower()
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGINT)     # Ctrl-C, as the line says
        assert p.wait(timeout=60) in (0, 130, -signal.SIGINT)


def test_the_gpu_block_says_what_it_needs_without_a_gpu(first_block, machine):
    """Without an NVIDIA driver each line stops with one `rankmap: error:` line naming what is
    missing (a GPU, NVML, torchrun), never a traceback; `rankmap monitor &` is run in the foreground."""
    if has_gpu():
        pytest.skip("this machine has an NVIDIA driver: the GPU block is run on GPU machines (gpu/)")
    work, env = machine
    lines = [l.replace(" &  ", "   ").replace(" & ", " ") for l in commands(EXAMPLES[1])]
    for g in run_block(lines, work, env, stop_at_failure=False):
        assert g["rc"] not in (None, 0), g
        assert "Traceback" not in g["err"], g
        last = g["err"].strip().splitlines()[-1]
        assert last.startswith("rankmap: error:"), g
        assert re.search(r"torchrun|NVML|NVIDIA|GPU|CUDA|topology", last), g
