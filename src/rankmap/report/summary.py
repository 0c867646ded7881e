"""The terminal summary of one profiled job (what ``rankmap profile`` prints when the job ends).

Everything comes from the store, so the same summary can be printed for any stored job. Byte
counts are shown in decimal units (kB = 1e3 bytes, MB = 1e6, GB = 1e9), as everywhere rankmap
shows bytes to a person.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from rich.color import Color
from rich.console import Console, Group
from rich.style import Style
from rich.table import Table
from rich.text import Text

from rankmap.errors import counted, noun
from rankmap.report.pop import pop_metrics

MAX_MATRIX = 32          # ranks shown one by one; larger jobs are shown in blocks of ranks
TOP_PAIRS = 10
MEM_LABELS = {"device": "device (GPU-resident)", "host": "host (staged through host memory)",
              "managed": "managed (unified memory)", "unknown": "unknown (no buffer / in place)"}


def human_bytes(n: float) -> str:
    """1234567 -> '1.23 MB' (decimal units)."""
    n = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1000 or unit == "PB":
            return f"{int(n)} B" if unit == "B" else f"{n:.3g} {unit}"
        n /= 1000
    return f"{n} B"  # pragma: no cover


def _compact(n: int) -> str:
    """Bytes in at most 5 characters, for the matrix cells."""
    if n == 0:
        return "·"
    for unit in ("", "k", "M", "G", "T", "P"):
        if n < 1000:
            return f"{n:.0f}{unit}" if unit == "" or n >= 10 else f"{n:.1f}{unit}"
        n /= 1000
    return f"{n:.0f}E"


def _heat(v: int, vmax: int) -> Style:
    """Background from pale yellow (little) to dark red (the heaviest pair), on a log scale."""
    if v <= 0 or vmax <= 0:
        return Style(color="grey50")
    x = math.log1p(v) / math.log1p(vmax)
    r = 255 - int(75 * x)
    g = int(235 - 215 * x)
    b = int(150 - 140 * x)
    fg = "white" if x > 0.6 else "black"
    return Style(bgcolor=Color.from_rgb(r, g, b), color=fg)


def blocks(n: int, limit: int = MAX_MATRIX) -> list[tuple[int, int]]:
    """Rank ranges ``[lo, hi)`` that split ``n`` ranks into at most ``limit`` rows/columns."""
    size = max(1, math.ceil(n / limit))
    # blocks of one size where a size up to twice the least divides n (64 ranks in 8 blocks of 8, not
    # 10 of 7 and one of 1): they then line up with nodes and GPUs, which come in such counts
    size = next((s for s in range(size, min(2 * size, n) + 1) if n % s == 0), size)
    return [(lo, min(n, lo + size)) for lo in range(0, n, size)]


class MatrixView:
    """The traffic matrix, as wide as the console it is printed on allows.

    Each rank keeps its own row and column up to :data:`MAX_MATRIX` ranks; the columns are then
    printed in panels of as many as fit, one under the other, rather than squeezed: at 80 columns (a
    terminal's, and rich's for a file or a pipe) one table of 16 ranks had its cells cut to "2.…"
    and lost its row labels. Larger jobs are shown in blocks of ranks, as many blocks as fit in one
    panel (at most :data:`MAX_MATRIX`)."""

    CELL = 5            # _compact's widest value
    LABEL = "src\\dst"

    def __init__(self, m: np.ndarray, title: str = "traffic matrix: bytes sent, row = source rank, column = destination"):
        self.m, self.title = m, title

    def _fit(self, width: int, labels_w: int) -> int:
        """Columns of ``labels_w`` characters (at least a cell's) that fit beside the row labels, each
        column with its padding of one on either side (a table wider than the console has columns
        cut or silently dropped by rich)."""
        col = max(self.CELL, labels_w) + 2
        return max(1, (width - max(len(self.LABEL), labels_w) - 2) // col)

    def __rich_console__(self, console: Console, options: Any) -> Any:
        m, n, width = self.m, self.m.shape[0], options.max_width
        title = self.title
        if n <= MAX_MATRIX:
            bs = blocks(n)
        else:                  # labels such as "60-63": the widest is the last one
            limit = MAX_MATRIX
            while True:
                bs = blocks(n, limit)
                last = bs[-1]
                if limit == 1 or len(bs) <= self._fit(width, len(f"{last[0]}-{last[1] - 1}")):
                    break
                limit -= 1
        if len(bs) < n:
            agg = np.array([[m[a:b, c:d].sum() for c, d in bs] for a, b in bs], dtype=np.int64)
            labels = [f"{a}-{b - 1}" if b - a > 1 else str(a) for a, b in bs]
            title += f" (blocks of {bs[0][1] - bs[0][0]} ranks)"
        else:
            agg, labels = m, [str(i) for i in range(n)]
        vmax = int(agg.max()) if agg.size else 0
        lw = max(map(len, labels), default=1)
        fit = self._fit(width, lw)
        panels = [range(lo, min(len(labels), lo + fit)) for lo in range(0, len(labels), fit)]
        if len(panels) > 1:
            title += f", columns in {len(panels)} panels"
        yield Text(title, style="bold")
        for k, cols in enumerate(panels):
            if k:
                yield Text("")
            t = Table(box=None, padding=(0, 1), show_edge=False)
            t.add_column(self.LABEL, justify="right", style="bold", no_wrap=True, min_width=max(len(self.LABEL), lw))
            for j in cols:
                t.add_column(labels[j], justify="right", no_wrap=True, min_width=max(self.CELL, lw))
            for i, lab in enumerate(labels):
                t.add_row(lab, *[Text(_compact(int(agg[i, j])), style=_heat(int(agg[i, j]), vmax)) for j in cols])
            yield t


def matrix_table(m: np.ndarray, title: str = "traffic matrix: bytes sent, row = source rank, column = destination") -> MatrixView:
    return MatrixView(m, title)


def summary_renderables(store: Any, job_id: int, *, cuda: bool = True) -> list[Any]:
    """The summary's parts, top to bottom (rich renderables); ``cuda``: with the CUDA activity section."""
    job = store.job(job_id)
    ranks = store.ranks(job_id)
    traffic = store.traffic(job_id, by_pair_source=True)
    out: list[Any] = []

    status = job.get("exit_status")
    elapsed = job.get("elapsed_ns")
    head = Text()
    head.append(f"rankmap job {job_id}", style="bold")
    head.append(f"  {job['command']}\n", style="cyan")
    head.append(f"launcher {job['launcher']} · {len({r['world_rank'] for r in ranks})} of "
                f"{counted(job.get('world_size') or '?', 'rank')} reported · "
                f"{noun(len(job.get('hosts') or []), 'host')} {', '.join(job.get('hosts') or []) or '?'}")
    if elapsed is not None:
        head.append(f" · {elapsed / 1e9:.2f} s")
    if status is not None:
        head.append(f" · exit status {status}", style="green" if status == 0 else "bold red")
    out.append(head)

    total = sum(r["bytes"] for r in traffic)
    if not traffic:
        # ranks that reported and sent nothing (MPI_Init and MPI_Finalize alone) are a fact about the
        # job; without a rank's records, nothing is known about its traffic
        world = job.get("world_size") or len({r["world_rank"] for r in ranks})
        if not ranks:
            said = "no traffic recorded"
        elif world == 1:     # its NCCL or MPI calls (a torchrun job of one worker) had no peer to send to
            said = "no bytes sent between ranks: the job has one rank"
        else:
            said = "no bytes sent: no rank recorded a message"
        out.append(Text(said, style="yellow"))
    elif not total:
        # messages of no payload (MPI_Barrier, empty sends): the operations and their messages are
        # all there is to show; pairs by bytes, the matrix and the memory kinds would be empty tables
        out.append(_by_operation(traffic, "no bytes sent: messages by class and operation", total))
    else:
        out.append(_by_operation(traffic, f"bytes by class and operation (total {human_bytes(total)})", total))
    mirror = (job.get("meta") or {}).get("collective_mirror")
    if mirror and any(r["class"] == "collective" and r.get("pair_source") in ("mirror", "model") for r in traffic):
        out.append(Text(f"collective pairs: {mirror}", style="dim"))
    if traffic and total:
        pairs: dict[tuple[int, int], list[int]] = {}
        for r in traffic:
            a = pairs.setdefault((r["src"], r["dst"]), [0, 0])
            a[0] += r["bytes"]
            a[1] += r["messages"]
        t = _table("heaviest pairs")
        for c, j in (("src → dst", "left"), ("bytes", "right"), ("messages", "right"), ("share", "right")):
            t.add_column(c, justify=j)
        top = sorted(pairs.items(), key=lambda kv: (-kv[1][0], kv[0]))[:TOP_PAIRS]
        for (s, d), (b, msgs) in top:
            t.add_row(f"{s} → {d}", human_bytes(b), f"{msgs:,}", f"{100 * b / total:.1f} %")
        out.append(t.group)
        out.append(matrix_table(store.traffic_matrix(job_id)))

        mem = store.bytes_by_mem(job_id)
        t = _table("where the sent bytes lived")
        t.add_column("memory")
        t.add_column("bytes", justify="right")
        t.add_column("share", justify="right")
        for kind in ("device", "host", "managed", "unknown"):
            if mem.get(kind):
                t.add_row(MEM_LABELS[kind], human_bytes(mem[kind]), f"{100 * mem[kind] / total:.1f} %")
        out.append(t.group)

    pop = pop_metrics([r for r in ranks if r["source"] == "mpi"])
    withheld = pop.withheld() if pop is not None else None
    if withheld:
        out.append(Text(f"POP efficiency: {withheld}", style="yellow"))
    elif pop is not None:
        t = _table(f"POP efficiency ({counted(pop.ranks, 'rank')}, runtime {pop.runtime_ns / 1e9:.3f} s, "
                   f"useful = outside MPI)")
        t.add_column("metric")
        t.add_column("value", justify="right")
        t.add_row("parallel efficiency", f"{100 * pop.parallel_efficiency:.1f} %")
        t.add_row("  load balance", f"{100 * pop.load_balance:.1f} %")
        t.add_row("  communication efficiency", f"{100 * pop.communication_efficiency:.1f} %")
        out.append(t.group)

    elif ranks:
        out.append(Text("POP efficiency: no MPI ranks recorded (time in NCCL calls is asynchronous GPU work, "
                        "not communication time)", style="dim"))

    if cuda:
        from rankmap.report.cuda import renderables, report_for_job
        out += renderables(report_for_job(store, job_id), full=False)

    problems = [p for r in ranks for p in (r.get("problems") or [])]
    if problems:
        out.append(Text(f"{counted(len(problems), 'record problem')}: see `rankmap export {job_id} --format json`",
                        style="yellow"))
    return out


def _by_operation(traffic: list[dict], heading: str, total: int) -> Group:
    """Bytes and messages by class and operation, the heaviest first; with no bytes sent (``total``
    0), messages only. Where the job has collectives, a column says where each operation's pairs
    come from: ``call`` (the call itself named the peer), ``library`` (the MPI library's own
    count), ``mirror`` (its algorithm selection followed), ``model``."""
    by_op: dict[tuple[str, str], list[int]] = {}
    sources: dict[tuple[str, str], set[str]] = {}
    for r in traffic:
        a = by_op.setdefault((r["class"], r["operation"]), [0, 0])
        a[0] += r["bytes"]
        a[1] += r["messages"]
        if r.get("pair_source"):
            sources.setdefault((r["class"], r["operation"]), set()).add(r["pair_source"])
    t = _table(heading)
    cols = ("class", "operation", "bytes", "messages", "share") if total else ("class", "operation", "messages")
    pairs_from = any(k == "collective" for k, _ in by_op)
    for c in cols + (("pairs",) if pairs_from else ()):
        t.add_column(c, justify="right" if c in ("bytes", "messages", "share") else "left")
    for key, (b, msgs) in sorted(by_op.items(), key=lambda kv: (-kv[1][0], -kv[1][1], kv[0])):
        cells = (human_bytes(b), f"{msgs:,}", f"{100 * b / total:.1f} %") if total else (f"{msgs:,}",)
        t.add_row(*key, *cells, *((", ".join(sorted(sources.get(key, ()))) or "?",) if pairs_from else ()))
    return t.group


class _table(Table):
    """A table with its heading on its own line, so a narrow table does not wrap the heading."""

    def __init__(self, heading: str):
        super().__init__()
        self.heading = heading

    @property
    def group(self) -> Group:
        return Group(Text(self.heading, style="bold"), self)


def print_summary(store: Any, job_id: int, console: Console | None = None, *, cuda: bool = True) -> None:
    console = console or Console()
    console.print(Group(*[_spaced(r) for r in summary_renderables(store, job_id, cuda=cuda)]))


def _spaced(r: Any) -> Any:
    return Group(r, Text(""))
