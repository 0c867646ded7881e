"""Open MPI's treematch, driven by bench/treematch_probe.c, read the right way round.

The benchmark turns treematch's rank permutation into a GPU placement. Reading the permutation
backwards would still give *a* placement, just a wrong one, and nothing downstream would notice;
these tests pin the direction on traffic whose best placement is obvious, and check that the
component really acts (it falls back to the identity silently when it cannot reorder).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, load_script

mq = load_script(ROOT / "bench" / "mapping_quality.py")
reason = mq.treematch_available()
needs_treematch = pytest.mark.skipif(reason is not None,
                                     reason=f"treematch comparison needs Open MPI's topo/treematch: {reason}")

TREE = ("pack:2 l3:2 core:2 pu:1", list(range(8)))  # 2 sockets x 2 switches x 2 GPUs


def _pairs(pairs: list[tuple[int, int]], n: int = 8) -> np.ndarray:
    """Light all-to-all background with a few heavy pairs on top."""
    T = np.ones((n, n))
    np.fill_diagonal(T, 0)
    for a, b in pairs:
        T[a, b] = T[b, a] = 1000.0
    return T


@pytest.mark.mpi
@needs_treematch
def test_heavy_pairs_land_on_sibling_leaves(tmp_path: Path) -> None:
    """Pairs that the rank order scatters must end up under one switch each. The pairs are not
    an involution of the rank order, so the inverse reading and the direct one disagree."""
    pairs = [(0, 3), (1, 6), (2, 5), (4, 7)]
    gpu_of, secs = mq.treematch_node(_pairs(pairs), TREE, tmp_path)
    assert sorted(gpu_of.tolist()) == list(range(8))
    for a, b in pairs:
        assert gpu_of[a] // 2 == gpu_of[b] // 2, (pairs, gpu_of.tolist())
    assert secs >= 0


@pytest.mark.mpi
@needs_treematch
def test_socket_level_groups(tmp_path: Path) -> None:
    """Two heavy cliques of four, interleaved in rank order, must each fill one socket."""
    n = 8
    T = np.ones((n, n))
    for group in ([0, 2, 5, 7], [1, 3, 4, 6]):
        for a in group:
            for b in group:
                T[a, b] = 1000.0
    np.fill_diagonal(T, 0)
    gpu_of, _ = mq.treematch_node(T, TREE, tmp_path)
    assert len({int(gpu_of[r]) // 4 for r in (0, 2, 5, 7)}) == 1, gpu_of.tolist()
    assert len({int(gpu_of[r]) // 4 for r in (1, 3, 4, 6)}) == 1, gpu_of.tolist()


@pytest.mark.mpi
@needs_treematch
def test_treematch_acts_and_basic_component_does_not(tmp_path: Path) -> None:
    """The benchmark's guard tells a working treematch from the silent fallback: with the
    component excluded, the same probe keeps rank order."""
    assert mq.treematch_acts(TREE, tmp_path)
    exe = tmp_path / "treematch_probe"  # built by the call above
    T = _pairs([(r, r + 4) for r in range(4)])
    mat = tmp_path / "m.txt"
    mat.write_text("8\n" + "\n".join(" ".join(str(x) for x in row) for row in T) + "\n")
    r = subprocess.run([mq.MPIRUN, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", "8",
                        "-x", "HWLOC_SYNTHETIC=" + TREE[0], "--mca", "topo", "^treematch",
                        "--mca", "mpi_yield_when_idle", "1", str(exe), str(mat)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "reordered no" in r.stdout, r.stdout


def test_gpu_tree_of_fixtures() -> None:
    """The tree shown to treematch follows the fixture: sockets, switches, then GPUs."""
    assert mq.gpu_tree(mq.topo("dgx1-v100")) == ("pack:2 l3:2 core:2 pu:1", list(range(8)))
    assert mq.gpu_tree(mq.topo("pcie-8gpu-2socket")) == ("pack:2 l3:2 core:2 pu:1", list(range(8)))
    assert mq.gpu_tree(mq.topo("summit")) == ("pack:2 core:3 pu:1", list(range(6)))
    assert mq.gpu_tree(mq.topo("pcie-16-nvbridge"))[0] == "pack:2 l3:2 l2:2 core:2 pu:1"
    assert mq.gpu_tree(mq.topo("dgx-a100")) is None  # NVSwitch: the PCIe tree says nothing useful
