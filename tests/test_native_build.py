"""The build cache's one build path (rankmap.capture.native_build.compile_cached) under concurrency:
processes that find a cold cache together wait for one build instead of each compiling the library."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

BUILDER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from rankmap.capture.native_build import compile_cached
    out, log = Path(sys.argv[1]), sys.argv[2]
    # a 'compiler' that takes a second and says each time it ran
    cmd = lambda tmp: [["sh", "-c", f"sleep 1; echo ran >> {log}; echo lib > {tmp}"]]
    print(compile_cached(out, "libx.so", cmd, "test hook"))
""")


def test_processes_on_a_cold_cache_share_one_build(tmp_path: Path):
    out, log = tmp_path / "cache" / "x", tmp_path / "builds.log"
    procs = [subprocess.Popen([sys.executable, "-c", BUILDER, str(out), str(log)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    results = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), results
    assert {r[0].strip() for r in results} == {str(out / "libx.so")}
    assert log.read_text().splitlines() == ["ran"]          # one build; the others waited and used it
    assert (out / "libx.so").read_text() == "lib\n"
    assert sorted(p.name for p in out.iterdir()) == [".build.lock", "libx.so"]   # no temporary left
