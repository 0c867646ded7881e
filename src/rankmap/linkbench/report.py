"""The terminal view of benchmark results: matrices like nvbandwidth's, size tables like OSU's and
nccl-tests', side by side where two paths are compared (staged vs CUDA IPC, NCCL vs MPI).

Works on the JSON form of a run (a fresh :class:`~rankmap.linkbench.rows.BenchRun` or one read back from
the store), so ``rankmap bench ... --show RUN`` prints a stored run exactly as it printed when measured.
"""

from __future__ import annotations

import math
from typing import Any

from rankmap.linkbench.rows import human_size
from rankmap.errors import counted

P2P_TITLES = {
    "ce_write": "memcpy CE, source pushes: GB/s, source GPU (row) -> destination GPU (column)",
    "ce_read": "memcpy CE, destination pulls: GB/s, source GPU (row) -> destination GPU (column)",
    "ce_bidir_write": "memcpy CE, both directions at once (push), total of both: GB/s",
    "ce_bidir_read": "memcpy CE, both directions at once (pull), total of both: GB/s",
    "sm_write": "SM copy kernel on the source GPU: GB/s, source (row) -> destination (column)",
    "sm_read": "SM copy kernel on the destination GPU: GB/s, source (row) -> destination (column)",
    "sm_bidir": "SM copy kernels on both GPUs at once, total of both: GB/s",
    "latency_ce": "small copy (copy engine), one after another: us per copy",
    "latency_sm": "dependent 8-byte load from the peer's memory (pointer chase): us per load, reader (row), memory (column)",
}
HOST_COLUMNS = (("h2d_pinned", "host->GPU pinned"), ("d2h_pinned", "GPU->host pinned"),
                ("h2d_pageable", "host->GPU pageable"), ("d2h_pageable", "GPU->host pageable"))


def _console():
    from rich.console import Console

    c = Console()
    return c if c.is_terminal else Console(width=200)


def _show(con, heading: str, table) -> None:
    """A heading on its own line (a table title would wrap to the table's width), then the table."""
    con.print(heading, markup=False, highlight=False)
    con.print(table)


def _fmt(x: float | None, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.{digits}f}"


def matrix(rows: list[dict], benchmark: str, value: str) -> tuple[list[int], dict[tuple[int, int], float]]:
    """GPU indices and {(src, dst): value} of one p2p benchmark."""
    cells = {(r["src"], r["dst"]): r[value] for r in rows if r["benchmark"] == benchmark and value in r}
    gpus = sorted({g for k in cells for g in k})
    return gpus, cells


def print_p2p(run: dict[str, Any]) -> None:
    from rich.table import Table

    con = _console()
    m = run.get("machine") or {}
    gpus_txt = ", ".join(f"GPU{g['index']} {g.get('name') or '?'} ({g.get('pci') or '?'})" for g in m.get("gpus", []))
    con.print(f"[bold]{counted(len(m.get('gpus', [])), 'GPU')}[/bold]: {gpus_txt}", markup=True, highlight=False)
    rows = run["rows"]
    for bench, title in P2P_TITLES.items():
        value = "latency_us" if bench.startswith("latency") else "total_GBps" if "bidir" in bench else "bandwidth_GBps"
        gpus, cells = matrix(rows, bench, value)
        if not cells:
            continue
        sample = next(r for r in rows if r["benchmark"] == bench)
        heading = (f"{title}  [{human_size(sample['size'])} x {sample.get('loops', '?')}, median of "
                   f"{sample.get('samples', '?')}]")
        t = Table()
        t.add_column("")
        for g in gpus:
            t.add_column(str(g), justify="right")
        for a in gpus:
            t.add_row(str(a), *[_fmt(cells.get((a, b)), 3 if value == "latency_us" else 2) if a != b else "-"
                                for b in gpus])
        _show(con, heading, t)
    host = [r for r in rows if r["benchmark"] in dict(HOST_COLUMNS)]
    if host:
        heading = "host <-> GPU: GB/s (pinned: copy engine behind a gate; pageable: synchronous cudaMemcpy)"
        t = Table()
        t.add_column("GPU")
        present = [(b, name) for b, name in HOST_COLUMNS if any(r["benchmark"] == b for r in host)]
        for _, name in present:
            t.add_column(name, justify="right")
        for g in sorted({r["dst"] if r["src"] == -1 else r["src"] for r in host}):
            vals = []
            for b, _ in present:
                hit = [r for r in host if r["benchmark"] == b and g in (r["src"], r["dst"])]
                vals.append(_fmt(hit[0].get("bandwidth_GBps")) if hit else "-")
            t.add_row(str(g), *vals)
        _show(con, heading, t)


def print_mpi(run: dict[str, Any]) -> None:
    from rich.table import Table

    con = _console()
    m = run.get("machine") or {}
    con.print(f"[bold]{m.get('mpi') or 'MPI'}[/bold], {counted(m.get('ranks'), 'rank')}; CUDA-aware: "
              f"{'yes' if m.get('cuda_aware') else 'no'} ({m.get('cuda_aware_how') or '?'})", highlight=False)
    rows = run["rows"]
    for bench in dict.fromkeys(r["benchmark"] for r in rows):
        mine = [r for r in rows if r["benchmark"] == bench]
        lat = any("latency_us" in r for r in mine)
        key = "latency_us" if lat else ("total_GBps" if bench == "bibw" else "bandwidth_GBps")
        unit = "us" if lat else "GB/s" + (" (both directions)" if bench == "bibw" else "")
        bufs = [b for b in ("host", "device", "device-staged", "device-ipc") if any(r["buffer"] == b for r in mine)]
        t = Table()
        t.add_column("size", justify="right")
        for b in bufs:
            t.add_column(b, justify="right")
        compare = "device-staged" in bufs and "device-ipc" in bufs
        if compare:
            t.add_column("IPC vs staged", justify="right")
        for size in sorted({r["size"] for r in mine}):
            vals = {r["buffer"]: r.get(key) for r in mine if r["size"] == size}
            cells = [_fmt(vals.get(b), 2) for b in bufs]
            if compare and vals.get("device-staged") and vals.get("device-ipc"):
                s, i = vals["device-staged"], vals["device-ipc"]
                gain = s / i if lat else i / s            # > 1: IPC is the faster path
                cells.append(f"{gain:.2f}x faster" if gain >= 1 else f"{1 / gain:.2f}x slower")
            elif compare:
                cells.append("-")
            t.add_row(human_size(size), *cells)
        _show(con, f"{bench}: {unit}", t)


def print_nccl(run: dict[str, Any]) -> None:
    from rich.table import Table

    con = _console()
    m = run.get("machine") or {}
    con.print(f"[bold]NCCL {m.get('nccl_version') or '?'}[/bold] ({m.get('nccl_library') or '?'}), "
              f"{counted(m.get('ranks'), 'rank')}, {m.get('mode')}", highlight=False)
    rows = run["rows"]
    for op in dict.fromkeys(r["benchmark"] for r in rows):
        mine = [r for r in rows if r["benchmark"] == op]
        libs = [(lib, buf) for lib, buf in dict.fromkeys((r["library"], r["buffer"]) for r in mine)]
        t = Table()
        t.add_column("size", justify="right")
        for lib, buf in libs:
            for what in ("time", "algbw", "busbw"):
                t.add_column(f"{lib} {buf}\n{what}" if what == "time" else what, justify="right")
        if len(libs) == 2:
            t.add_column(f"busbw\n{libs[0][0]}/{libs[1][0]}", justify="right")
        for size in sorted({r["size"] for r in mine}):
            cells, bus = [], []
            for lib, buf in libs:
                hit = [r for r in mine if r["size"] == size and r["library"] == lib and r["buffer"] == buf]
                r = hit[0] if hit else {}
                cells += [_fmt(r.get("latency_us")), _fmt(r.get("algbw_GBps")), _fmt(r.get("busbw_GBps"))]
                bus.append(r.get("busbw_GBps"))
            if len(libs) == 2:
                cells.append(f"{bus[0] / bus[1]:.2f}" if bus[0] and bus[1] else "-")
            t.add_row(human_size(size), *cells)
        _show(con, f"{op} (float32, sum, out of place): time us, algbw and busbw GB/s", t)


def print_run(run: dict[str, Any]) -> None:
    {"p2p": print_p2p, "mpi": print_mpi, "nccl": print_nccl}[run["kind"]](run)
    for n in run.get("notes") or []:
        _console().print(f"note: {n}", markup=False, highlight=False)
