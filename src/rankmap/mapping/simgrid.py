"""An independent judge: simulate MPI programs on a topology with SimGrid/SMPI.

rankmap's cost model is a bound (the busiest link); whether a placement really makes a program
faster is better shown by a simulator that knows nothing of rankmap's solvers. So any platform
(node topology x node count) is exported as a SimGrid platform: one host per GPU, one
``SPLITDUPLEX`` link per topology link (each direction its own bandwidth, as in the cost model), one per
NIC for the network (the switch core non-blocking, as in the cost model), and for every ordered GPU
pair an explicit route made of the *same* directed hops the topology routes. The program, built with
``smpicc``, is then run under ``smpirun`` once with the default placement and once with rankmap's; the
placement is nothing but the order of the hostfile (line ``i`` = the host of rank ``i``).
Computation is not simulated (``smpi/simulate-computation:no``): the simulated time is the time the
program spends communicating.

Host-staged bytes travel the way the cost model routes them: a GPU pair whose ranks exchange host
memory (an MPI without CUDA support: device -> host, MPI over host memory, host -> device) gets the
host-staged route of :mod:`rankmap.mapping.platform` (up to the sender's CPU, across the CPU
interconnect if the receiver's GPU hangs off another socket, down to the receiver), and two ranks on
one GPU that exchange host memory go up to the host and back instead of staying on the GPU. SimGrid
routes per pair of hosts, not per message, so the route of a GPU pair follows the kind of byte that
dominates between the ranks placed there; the platform is therefore written per placement.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np

from rankmap.errors import RankmapError
from rankmap.mapping.cost import Traffic
from rankmap.mapping.platform import Platform

LATENCY_US = {"nvlink": 0.7, "pcie": 1.0, "cpu_interconnect": 0.5, "network": 1.5}


def available() -> bool:
    return bool(shutil.which("smpirun") and shutil.which("smpicc"))


def host(u: int, g: int) -> str:
    return f"n{u}g{g}"


def staged_pairs(pf: Platform, traffic: Traffic | None, node_of, gpu_of) -> np.ndarray | None:
    """(nodes, G, G) bool: which in-node GPU pairs (a GPU with itself included) carry mostly
    host-staged bytes under this placement, or None when no byte is host-staged."""
    if traffic is None or traffic.host is None:
        return None
    node_of, gpu_of = np.asarray(node_of), np.asarray(gpu_of)
    G = pf.G
    s, d = traffic.src, traffic.dst
    same = node_of[s] == node_of[d]
    key = (node_of[s] * G + gpu_of[s]) * G + gpu_of[d]
    host = np.bincount(key[same], weights=traffic.host[same], minlength=pf.nodes * G * G)
    total = np.bincount(key[same], weights=traffic.bytes[same], minlength=pf.nodes * G * G)
    return (host > 0.5 * total).reshape(pf.nodes, G, G) & (total > 0).reshape(pf.nodes, G, G)


def platform_xml(pf: Platform, staged: np.ndarray | None = None) -> str:
    """The SimGrid (platform version 4.1) description of ``pf``; ``staged`` (from
    :func:`staged_pairs`) says which in-node GPU pairs take the host-staged route."""
    m = pf.node
    topo = m.topo
    out = ["<?xml version='1.0'?>", '<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">',
           '<platform version="4.1">', '  <zone id="rankmap" routing="Full">']
    for u in range(pf.nodes):
        for g in range(m.G):
            out.append(f'    <host id="{host(u, g)}" speed="1Gf"/>')
    used_links = sorted({i for i, _ in m.dlinks})
    for u in range(pf.nodes):
        for i in used_links:
            l = topo.links[i]
            lat = LATENCY_US.get(l.kind.value, 1.0)
            out.append(f'    <link id="n{u}L{i}" bandwidth="{l.bandwidth:.6g}GBps" latency="{lat}us" '
                       f'sharing_policy="SPLITDUPLEX"/>')
        if pf.nodes > 1:
            for k, bw in enumerate(m.nic_bw):
                out.append(f'    <link id="n{u}N{k}" bandwidth="{bw:.6g}GBps" latency="{nic_latency_us(m, k):.6g}us" '
                           f'sharing_policy="SPLITDUPLEX"/>')
        for g in range(m.G):
            out.append(f'    <link id="lo{u}g{g}" bandwidth="1000GBps" latency="0.1us"/>')

    def ctn(u: int, d: int) -> str:
        i, direction = m.dlinks[d]
        return f'<link_ctn id="n{u}L{i}" direction="{"UP" if direction == 0 else "DOWN"}"/>'

    local = {(g, h): [int(d) for d in np.nonzero(m.inc[g, h])[0]] for g in range(m.G) for h in range(m.G) if g != h}
    # host-staged routes, a link as often as the route crosses it (the diagonal too: up and back down)
    via_host = {(g, h): [int(d) for d in np.repeat(np.arange(m.D), m.hinc[g, h])]
                for g in range(m.G) for h in range(m.G)}
    ext_out = [[int(d) for d in np.nonzero(m.ext_out_inc[g])[0]] for g in range(m.G)]
    ext_in = [[int(d) for d in np.nonzero(m.ext_in_inc[g])[0]] for g in range(m.G)]

    def by_host(u: int, g: int, h: int) -> bool:
        return staged is not None and bool(staged[u, g, h]) and bool(via_host[g, h])

    for u in range(pf.nodes):
        for g in range(m.G):
            hops = ("".join(ctn(u, d) for d in via_host[g, g]) if by_host(u, g, g)
                    else f'<link_ctn id="lo{u}g{g}"/>')
            out.append(f'    <route src="{host(u, g)}" dst="{host(u, g)}">{hops}</route>')
    for u in range(pf.nodes):
        for v in range(pf.nodes):
            for g in range(m.G):
                for h in range(m.G):
                    if u == v:
                        if g == h:
                            continue
                        hops = "".join(ctn(u, d) for d in (via_host[g, h] if by_host(u, g, h) else local[g, h]))
                    else:
                        ku, kv = m.nic_of[g] or 0, m.nic_of[h] or 0
                        hops = ("".join(ctn(u, d) for d in ext_out[g])
                                + f'<link_ctn id="n{u}N{ku}" direction="UP"/>'
                                + f'<link_ctn id="n{v}N{kv}" direction="DOWN"/>'
                                + "".join(ctn(v, d) for d in ext_in[h]))
                    out.append(f'    <route src="{host(u, g)}" dst="{host(v, h)}" symmetrical="NO">{hops}</route>')
    out += ["  </zone>", "</platform>", ""]
    return "\n".join(out)


def nic_latency_us(m, k: int) -> float:
    """One-way latency of NIC ``k``'s network link: the NIC's ``latency_us`` where the topology says
    (a measured or shaped network), else the default of a network hop."""
    v = m.nics[k].attrs.get("latency_us") if k < len(m.nics) else None
    return float(v) if isinstance(v, (int, float)) and v >= 0 else LATENCY_US["network"]


def hostfile_lines(node_of, gpu_of) -> list[str]:
    return [host(int(u), int(g)) for u, g in zip(node_of, gpu_of)]


def build(source: str | Path, out: str | Path, deps: tuple[str | Path, ...] = ()) -> Path:
    """Compile an MPI C program with ``smpicc`` (once; rebuilt when the source, or a header of
    ``deps``, is newer)."""
    out = Path(out).resolve()
    src = Path(source).resolve()
    if out.exists() and out.stat().st_mtime >= max(Path(f).stat().st_mtime for f in (src, *deps)):
        return out
    smpicc = shutil.which("smpicc")
    if not smpicc:
        raise RankmapError("smpicc not found: install SimGrid (Debian: libsimgrid-dev) to simulate")
    out.parent.mkdir(parents=True, exist_ok=True)
    p = subprocess.run([smpicc, "-O2", "-w", str(src), "-o", str(out)], capture_output=True, text=True,
                       cwd=str(src.parent))
    if p.returncode != 0:
        raise RankmapError(f"smpicc failed on {src}: {(p.stderr or p.stdout).strip().splitlines()[-1:]}")
    return out


_SIMTIME = re.compile(r"Simulated time:\s*([0-9.eE+-]+)\s*seconds")


def simulate(program: list[str], pf: Platform, node_of, gpu_of, workdir: str | Path,
             timeout: float = 600, tag: str = "run", traffic: Traffic | None = None) -> float:
    """Simulated seconds of ``program`` (an smpicc binary and its arguments) placed as given.

    ``traffic`` (the program's profile, with its host-staged part) decides which GPU pairs take the
    host-staged route; without it every byte takes the GPU-to-GPU route."""
    smpirun = shutil.which("smpirun")
    if not smpirun:
        raise RankmapError("smpirun not found: install SimGrid (Debian: simgrid) to simulate")
    wd = Path(workdir)
    wd.mkdir(parents=True, exist_ok=True)
    xml = wd / f"platform-{tag}.xml"
    xml.write_text(platform_xml(pf, staged_pairs(pf, traffic, node_of, gpu_of)))
    hf = wd / f"hosts-{tag}.txt"
    hf.write_text("\n".join(hostfile_lines(node_of, gpu_of)) + "\n")
    n = len(node_of)
    cmd = [smpirun, "-np", str(n), "-platform", str(xml), "-hostfile", str(hf),
           "--cfg=smpi/display-timing:yes", "--cfg=smpi/simulate-computation:no", "--cfg=smpi/host-speed:1Gf",
           "--log=root.thres:warning", "--log=smpi_utils.thres:info", *program]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=str(wd))
    except subprocess.TimeoutExpired:
        raise RankmapError(f"smpirun ran longer than {timeout:.0f} s on {Path(program[0]).name}") from None
    m = _SIMTIME.search(p.stdout + p.stderr)
    if p.returncode != 0 or not m:
        tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RankmapError(f"smpirun failed on {Path(program[0]).name} (exit {p.returncode}): {tail[0]}")
    return float(m.group(1))


def judge(program: list[str], pf: Platform, default: tuple, tuned: tuple, workdir: str | Path,
          traffic: Traffic | None = None) -> dict:
    """Simulated time of the default and the tuned placement, and their ratio (``traffic``: as for
    :func:`simulate`)."""
    wd = Path(workdir)
    t_def = simulate(program, pf, *default, wd, tag="default", traffic=traffic)
    t_tun = simulate(program, pf, *tuned, wd, tag="tuned", traffic=traffic)
    return {"default_s": t_def, "tuned_s": t_tun, "speedup": (t_def / t_tun) if t_tun > 0 else None,
            "program": [Path(program[0]).name, *program[1:]]}



def examples_dir() -> Path | None:
    """The bundled MPI examples (``examples/mpi`` of the source tree), if present."""
    here = Path(__file__).resolve()
    for base in here.parents:
        d = base / "examples" / "mpi"
        if (d / "halo.h").exists():
            return d
    return None


def build_example(name: str, cache: str | Path) -> Path:
    """Build an example for SMPI. ``halo4d`` is built without its per-dimension sub-communicators
    (same halo traffic, Isend/Irecv on the Cartesian communicator): SMPI's ``MPI_Cart_sub`` in the
    SimGrid release Debian ships dies with SIGFPE."""
    d = examples_dir()
    if d is None:
        raise RankmapError("the MPI examples (examples/mpi) are not beside this rankmap installation")
    cache = Path(cache)
    cache.mkdir(parents=True, exist_ok=True)
    if name == "halo4d":
        src = cache / "halo4d_smpi.c"
        text = f'#include "{d / "halo.h"}"\nint main(int argc, char **argv) {{ return halo_main(argc, argv, 4); }}\n'
        if not src.exists() or src.read_text() != text:
            src.write_text(text)
        return build(src, cache / "halo4d", deps=(d / "halo.h",))
    return build(d / f"{name}.c", cache / name, deps=(d / "halo.h",))
