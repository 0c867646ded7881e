"""`rankmap topo` as a user runs it, including every kind of bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import assert_one_line_error, cli, rankmap
from rankmap.formats import topology_json
from rankmap.topology import fixtures

DATA = Path(__file__).parent / "data" / "nvsmi"


def cells(text: str) -> dict[tuple[str, str], str]:
    lines = [l for l in text.splitlines() if l.strip()]
    header = lines[0].split("\t")[1:]
    out = {}
    for l in lines[1:]:
        parts = l.split("\t")
        if not parts[0].startswith(("GPU", "NIC")) or parts[0].startswith("NIC Legend"):
            continue
        for h, v in zip(header, parts[1:]):
            out[(parts[0], h)] = v.strip()
    return out


def test_nvsmi_format_dgx1():
    p = cli("topo", "--fixture", "dgx1-v100", "--format", "nvsmi")
    assert p.returncode == 0, p.stderr
    c = cells(p.stdout)
    assert c[("GPU0", "GPU3")] == "NV2"
    assert c[("GPU0", "GPU1")] == "NV1"
    assert c[("GPU0", "GPU5")] == "SYS"
    assert c[("GPU0", "NIC0")] == "PIX" and c[("GPU0", "CPU Affinity")] == "0-19,40-59"


def test_table_h200():
    p = cli("topo", "--fixture", "h200x2-nvswitch")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "NV18 478.1" in out
    assert "26.562" in out and "478.116" in out and "NVLink4" in out
    assert "0-31" in out
    assert "NICs: none" in out
    assert "NVML answers Not Supported" in out  # an unknown
    assert "Source: Recorded on a 2x NVIDIA H200" in out


def test_table_dgx1_rows():
    p = cli("topo", "--fixture", "dgx1-v100")
    assert p.returncode == 0, p.stderr
    row0 = next(l for l in p.stdout.splitlines() if l.strip("│ ").startswith("GPU0 "))
    assert [c.strip() for c in row0.split("│")[1:-1]] == [
        "GPU0", "X", "NV1 25.0", "NV1 25.0", "NV2 50.0", "NV2 50.0", "SYS 15.8", "SYS 15.8", "SYS 15.8",
        "0-19,40-59", "0", "mlx5_0 (PIX)"]
    assert "ConnectX-4 EDR InfiniBand" in p.stdout


def test_table_in_a_narrow_terminal():
    """In an 80-column terminal the 8-GPU grid had cells cut to "GP…" and "25…" and the nearest NIC to
    "ml…". It is now printed in panels of GPU columns, each cell whole, with the affinity in a table
    of its own; in a terminal wide enough, one grid as before."""
    import re

    def rows(width: int) -> dict[str, list[str]]:
        p = cli("topo", "--fixture", "dgx1-v100", env={"FORCE_COLOR": "1", "COLUMNS": str(width)})
        assert p.returncode == 0, p.stderr
        text = re.sub(r"\x1b\[[0-9;]*m", "", p.stdout)
        lines = text[:text.index("NVLink bundles")].splitlines()
        assert max(map(len, lines)) <= width and "…" not in "".join(lines), text
        got: dict[str, list[str]] = {}
        for ln in lines:
            c = [x.strip() for x in ln.split("│")[1:-1]]
            if c and c[0].startswith("GPU"):
                got.setdefault(c[0], []).extend(c[1:])
        return got

    narrow, wide = rows(80), rows(200)
    assert wide["GPU0"] == ["X", "NV1 25.0", "NV1 25.0", "NV2 50.0", "NV2 50.0", "SYS 15.8", "SYS 15.8", "SYS 15.8",
                            "0-19,40-59", "0", "mlx5_0 (PIX)"]
    assert narrow == wide          # the same cells, GPU columns first, in order, then the affinity


def test_json_format_round_trips(tmp_path):
    p = cli("topo", "--fixture", "summit", "--format", "json")
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    assert data["format"] == "rankmap-topology" and data["version"] == 1 and data["name"] == "summit"
    f = tmp_path / "summit.json"
    f.write_text(p.stdout)
    q = cli("topo", "--from", str(f), "--format", "nvsmi")
    assert q.returncode == 0, q.stderr
    assert cells(q.stdout)[("GPU0", "GPU3")] == "SYS" and cells(q.stdout)[("GPU0", "GPU2")] == "NV2"


def test_list():
    p = cli("topo", "--list")
    assert p.returncode == 0
    names = [l.split()[0] for l in p.stdout.splitlines()]
    assert names == list(fixtures.NAMES)
    assert "hybrid cube-mesh" in p.stdout


def test_from_nvsmi_text(recordings):
    p = cli("topo", "--from", str(recordings / "h200x2-nvidia-smi-topo-m.txt"))
    assert p.returncode == 0, p.stderr
    assert "NV18 450.0" in p.stdout  # nominal 25 GB/s per link: the text does not name the GPU
    assert "does not name the GPU" in p.stdout
    q = cli("topo", "--from", str(DATA / "dgx-a100-nps4.txt"), "--format", "nvsmi")
    assert cells(q.stdout)[("GPU6", "NIC7")] == "PXB"


# ------------------------------------------------------------------ bad input: one line, non-zero, no traceback
def test_unknown_fixture():
    assert_one_line_error(cli("topo", "--fixture", "dgx-9000"), "unknown fixture 'dgx-9000'", "dgx1-v100", "summit")


def test_missing_file(tmp_path):
    assert_one_line_error(cli("topo", "--from", str(tmp_path / "nope.json")), "nope.json: no such file")


def test_malformed_json(tmp_path):
    f = tmp_path / "topo.json"
    f.write_text('{"format": "rankmap-topology", "version": 1,\n "devices": [}')
    assert_one_line_error(cli("topo", "--from", str(f)), "topo.json: not valid JSON: line 2 column")


def _broken(tmp_path, mutate) -> Path:
    data = json.loads(topology_json.dumps(fixtures.get("dgx1-v100")))
    mutate(data)
    f = tmp_path / "topo.json"
    f.write_text(json.dumps(data))
    return f


@pytest.mark.parametrize("mutate,needle", [
    (lambda d: d["links"][3].update(bandwidth="x"), 'topo.json: links[3].bandwidth: expected a positive number, got "x"'),
    (lambda d: d["links"][0].update(bandwidth=-4), "links[0].bandwidth: expected a positive number, got -4"),
    (lambda d: d["links"][2].update(b="gpu42"), "links[2].b: unknown device 'gpu42'"),
    (lambda d: d["links"][1].update(kind="carrier-pigeon"), "links[1].kind: expected one of nvlink, pcie"),
    (lambda d: d["devices"][5].update(kind="toaster"), "devices[5].kind: expected one of gpu, nvswitch"),
    (lambda d: d["devices"][1].update(id="cpu0"), "devices[1].id: duplicate device id 'cpu0'"),
    (lambda d: d["devices"][0].update(index=-1), "devices[0].index: expected a non-negative integer, got -1"),
    (lambda d: d["links"][0].update(count=0), "links[0].count: expected an integer >= 1, got 0"),
    (lambda d: d["links"][0].update(speed=3), "links[0].speed: unexpected field"),
    (lambda d: d.update(version=7), "version: version 7 is newer than this rankmap reads (1)"),
    (lambda d: d.update(format="something-else"), "format: expected 'rankmap-topology'"),
    (lambda d: d.pop("links"), "topo.json: links: missing"),
    (lambda d: d.update(notes="text"), "notes: expected a list of strings"),
])
def test_wrong_field(tmp_path, mutate, needle):
    assert_one_line_error(cli("topo", "--from", str(_broken(tmp_path, mutate))), needle)


def test_bad_nvsmi_text(tmp_path):
    f = tmp_path / "topo.txt"
    f.write_text("\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU1\tNVX\t X \n")
    assert_one_line_error(cli("topo", "--from", str(f)), "topo.txt: line 3: row GPU1, column GPU0: 'NVX'")
    f.write_text("this is not a topology\n")
    assert_one_line_error(cli("topo", "--from", str(f)), "no 'nvidia-smi topo -m' matrix found")


def test_missing_nvml():
    p = rankmap("topo", env={"RANKMAP_NVML_LIB": "/nonexistent/libnvidia-ml.so.1"})
    assert_one_line_error(p, "no NVML", "/nonexistent/libnvidia-ml.so.1", "--fixture NAME", "--from FILE")


def test_live_without_gpu_here():
    """This test machine has no NVIDIA driver: the default (live) must say so in one line."""
    p = rankmap("topo")
    if p.returncode == 0:
        pytest.skip("this machine has a GPU")
    assert_one_line_error(p, "--fixture NAME")


def test_conflicting_sources():
    p = cli("topo", "--fixture", "summit", "--from", "x.json")
    assert p.returncode == 2 and "not allowed with argument" in p.stderr and "Traceback" not in p.stderr
