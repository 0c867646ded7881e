"""``GET /metrics``: rankmap's link counters and rank traffic in the Prometheus text format.

Dashboards built for NVIDIA's dcgm-exporter work unchanged: the link rates carry its metric names
and labels (``gpu``, ``UUID``, ``device``, ``modelName``, ``Hostname``) and, like dcgm-exporter's
``DCGM_FI_PROF_PCIE_TX_BYTES`` (declared a gauge in its ``dcp-metrics-included.csv``), they are
rates in bytes per second, here over the sampler's last interval. Beside them, rankmap's own
counters: ``rankmap_link_bytes_total`` (the cumulative bytes of the sampling session, for
``rate()``), and ``rankmap_pair_bytes_total{job,src,dst,class}``, the bytes each rank sent each
other rank, by traffic class.

Per-link NVLink rates carry dcgm-exporter's per-link names, ``DCGM_FI_PROF_NVLINK_L<k>_TX_BYTES`` /
``_RX_BYTES``, for the links a sampler recorded one by one (samples of link ``nvlink<k>``). Every
series of a job carries the job's labels: ``rankmap_job`` and, for a job launched inside a Slurm
allocation, ``slurm_job_id`` and ``slurm_step_id`` (what ``rankmap profile`` found in its
environment), so a dashboard joins them with its scheduler's series.

Bounded: at most ``MAX_JOBS`` jobs, and per job the heaviest pair series, ``MAX_PAIR_SERIES`` of
them or the job's share of ``MAX_PAIR_SERIES_TOTAL`` when many jobs share a scrape (a job of
thousands of ranks would otherwise expose millions); ``rankmap_pair_series_omitted{job}`` says how
many were left out. So a scrape holds at most ``MAX_PAIR_SERIES_TOTAL`` pair series, one omitted
count per job, and the link series of at most ``MAX_JOBS`` running samplers.

Fast: the running jobs, their newest link samples and every job's heaviest pairs are read in one
query each, not one per job; and the pairs of a job that no longer runs are kept from one scrape
to the next (:class:`Exposition`): its bytes are final, so a scrape reads the store only for the
jobs that run (a job whose state, end or last write changes is read again).

Which samples: for every host and GPU, the newest sample of any running sampler (a
``rankmap monitor`` session, or a ``rankmap profile`` that samples), if it is recent; a GPU whose
sampler stopped is left out rather than shown frozen. Which jobs: those running, and those that
ended in the last ``RECENT_S`` seconds, so that a scrape still sees their final totals.
"""

from __future__ import annotations

import re
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import sqlalchemy as sa

from rankmap.store import Store
from rankmap.store import schema as S
from rankmap.store.jobs import job_state
from rankmap.web.utilisation import sampler_t0_ns

RECENT_S = 600
STALE_S = 10.0
MAX_JOBS = 64
MAX_PAIR_SERIES = 2048      # per job: the heaviest (src, dst, class) series
MAX_PAIR_SERIES_TOTAL = 8192  # all jobs of one scrape together: each job gets its share
PER_LINK = re.compile(r"^nvlink(\d+)$")

RATES = (  # (metric, link, field, help)
    ("DCGM_FI_PROF_NVLINK_TX_BYTES", "nvlink", "tx_bytes",
     "The rate of data transmitted over NVLink, in bytes per second, payload only as NVML counts it "
     "(DCGM documents header and payload; rankmap link sampler)."),
    ("DCGM_FI_PROF_NVLINK_RX_BYTES", "nvlink", "rx_bytes",
     "The rate of data received over NVLink, in bytes per second, payload only as NVML counts it "
     "(DCGM documents header and payload; rankmap link sampler)."),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "pcie", "tx_bytes",
     "The rate of data transmitted over the PCIe bus, in bytes per second (rankmap link sampler: payload, an "
     "estimate within ~4 % where read through NVML GPM; header and payload through NVML's PCIe counters)."),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "pcie", "rx_bytes",
     "The rate of data received over the PCIe bus, in bytes per second (rankmap link sampler: payload, an "
     "estimate within ~4 % where read through NVML GPM; header and payload through NVML's PCIe counters)."),
)


def _esc(v: Any) -> str:
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(**kv: Any) -> str:
    return "{" + ",".join(f'{k}="{_esc(v)}"' for k, v in kv.items()) + "}"


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() and abs(v) < 2**63 else repr(float(v))


def job_labels(job: dict) -> dict[str, str]:
    """The labels of every series of a job: its rankmap id and, inside Slurm, its job and step ids."""
    out = {"rankmap_job": str(job["id"])}
    slurm = (job.get("meta") or {}).get("slurm") or {}
    for key in ("job_id", "step_id"):
        if slurm.get(key) not in (None, ""):
            out[f"slurm_{key}"] = str(slurm[key])
    return out


def _running(store: Store) -> list[dict]:
    """The newest MAX_JOBS jobs that run: no exit status, and the store's state says running (a job
    whose rankmap died has no exit status either, and is ``incomplete``). One query."""
    j = S.jobs
    with store.engine.connect() as c:
        rows = c.execute(sa.select(j.c.id, j.c.launcher, j.c.meta, j.c.hosts, j.c.state, j.c.profiler,
                                   j.c.heartbeat)
                         .where(j.c.exit_status.is_(None), j.c.state == "running")
                         .order_by(j.c.id.desc()).limit(MAX_JOBS)).mappings().all()
    return [dict(r) for r in rows if job_state(r) == "running"]


def _interval_s(job: dict) -> float:
    info = (job.get("meta") or {}).get("monitor") or (job.get("meta") or {}).get("link_sampler") or {}
    return float(info.get("interval_ms") or 100) / 1000


def _last_two(store: Store, jobs: list[dict]) -> dict[int, dict[tuple[int, str], list[dict]]]:
    """The two newest samples of every (GPU, link) of each job, in two queries for all of them:
    each job's newest sample, then its samples of the last few intervals before it (a (GPU, link)
    whose newest sample is older than that is stale anyway, see ``STALE_S``)."""
    t = S.link_samples
    ids = [int(j["id"]) for j in jobs]
    if not ids:
        return {}
    with store.engine.connect() as c:
        tops = dict(c.execute(sa.select(t.c.job, sa.func.max(t.c.t_ns)).where(t.c.job.in_(ids))
                              .group_by(t.c.job)).all())
        if not tops:
            return {}
        back = {int(j["id"]): int((max(STALE_S, 5 * _interval_s(j)) + 3 * _interval_s(j)) * 1e9) for j in jobs}
        since = sa.or_(*(sa.and_(t.c.job == jid, t.c.t_ns >= int(top) - back[int(jid)]) for jid, top in tops.items()))
        rows = c.execute(sa.select(t).where(since).order_by(t.c.job, t.c.t_ns.desc())).mappings().all()
    out: dict[int, dict[tuple[int, str], list[dict]]] = {}
    for r in rows:
        lst = out.setdefault(int(r["job"]), {}).setdefault((int(r["device"]), str(r["link"])), [])
        if len(lst) < 2:
            lst.append(dict(r))
    return out


def link_metrics(store: Store, now_ns: int | None = None, running: list[dict] | None = None) -> list[str]:
    """The dcgm-exporter rate gauges and rankmap's cumulative link counters of running samplers."""
    now_ns = now_ns or time.time_ns()
    cands: dict[tuple[str, int], dict[int, tuple]] = {}  # (host, gpu) -> job id -> (prefer, job, gpu, links)
    sampling = [j for j in (_running(store) if running is None else running) if sampler_t0_ns(j) is not None]
    newest = _last_two(store, sampling)
    for job in sampling:
        t0 = sampler_t0_ns(job)
        meta = job.get("meta") or {}
        info = meta.get("monitor") or meta.get("link_sampler") or {}
        host = info.get("host") or (job.get("hosts") or ["unknown"])[0]
        gpus = {int(g["index"]): g for g in info.get("gpus") or []}
        interval = _interval_s(job)
        for (dev, link), rows in newest.get(int(job["id"]), {}).items():
            wall = t0 + int(rows[0]["t_ns"])
            if now_ns - wall > max(STALE_S, 5 * interval) * 1e9:
                continue
            # a monitor session is preferred, then the newest sample
            c = cands.setdefault((host, dev), {}).setdefault(
                int(job["id"]), [(job.get("launcher") == "monitor", wall), job, gpus.get(dev, {}), {}])
            c[0] = max(c[0], (job.get("launcher") == "monitor", wall))
            c[3][link] = rows
    series = []
    for (host, dev), by_job in sorted(cands.items()):
        _, job, g, links = max(by_job.values(), key=lambda c: c[0])
        labels = dict(gpu=dev, UUID=g.get("uuid", ""), device=f"nvidia{dev}", modelName=g.get("name", ""),
                      Hostname=host, **job_labels(job))
        series.append((labels, job, links))
    rates = list(RATES)
    links_seen = sorted({int(m.group(1)) for _l, _j, by in series for link in by if (m := PER_LINK.match(link))})
    for k in links_seen:
        for field, word in (("tx_bytes", "transmitted"), ("rx_bytes", "received")):
            rates.append((f"DCGM_FI_PROF_NVLINK_L{k}_{field[:2].upper()}_BYTES", f"nvlink{k}", field,
                          f"The rate of data {word} over NVLink {k}, in bytes per second, payload only as NVML "
                          f"counts it (rankmap link sampler)."))
    lines: list[str] = []
    for metric, link, field, help_ in rates:
        body = []
        for labels, _job, by in series:
            rows = by.get(link)
            if not rows or len(rows) < 2 or rows[0][field] is None or rows[1][field] is None:
                continue
            dt = (int(rows[0]["t_ns"]) - int(rows[1]["t_ns"])) / 1e9
            if dt <= 0:
                continue
            body.append(f"{metric}{_labels(**labels)} {_num(round((rows[0][field] - rows[1][field]) / dt, 3))}")
        if body:
            lines += [f"# HELP {metric} {help_}", f"# TYPE {metric} gauge", *body]
    body = []
    for labels, job, by in series:
        for link, rows in sorted(by.items()):
            for field, direction in (("tx_bytes", "tx"), ("rx_bytes", "rx")):
                if rows[0][field] is not None:
                    body.append(f"rankmap_link_bytes_total{_labels(**labels, link=link, direction=direction, job=job['id'])}"
                                f" {int(rows[0][field])}")
    if body:
        lines += ["# HELP rankmap_link_bytes_total Bytes through the GPU's links since its sampling session started.",
                  "# TYPE rankmap_link_bytes_total counter", *body]
    return lines


PairRows = list[tuple[int, int, str, int]]     # (src, dst, class, bytes), the heaviest first


def _heaviest_pairs(store: Store, ids: list[int], limit: int) -> dict[int, tuple[PairRows, int]]:
    """Per job: its ``limit`` heaviest (src, dst, class) series and how many it has in all, for all
    ``ids`` in one query (a window over the pairs, numbered per job)."""
    if not ids:
        return {}
    t = S.traffic
    keys = (t.c.job, t.c.src, t.c.dst, t.c["class"])
    g = sa.select(*keys, sa.func.sum(t.c.bytes).label("b")).where(t.c.job.in_(ids)).group_by(*keys).subquery()
    order = (g.c.b.desc(), g.c.src, g.c.dst, g.c["class"])
    ranked = sa.select(g, sa.func.row_number().over(partition_by=g.c.job, order_by=order).label("rn"),
                       sa.func.count().over(partition_by=g.c.job).label("n")).subquery()
    q = sa.select(ranked.c.job, ranked.c.src, ranked.c.dst, ranked.c["class"], ranked.c.b, ranked.c.n) \
        .where(ranked.c.rn <= limit)
    out: dict[int, tuple[PairRows, int]] = {jid: ([], 0) for jid in ids}
    with store.engine.connect() as c:
        for jid, src, dst, klass, nbytes, n in c.execute(q):
            rows, _ = out[int(jid)]
            rows.append((int(src), int(dst), str(klass), int(nbytes or 0)))
            out[int(jid)] = (rows, int(n))
    return out


def _pair_jobs(store: Store, now: datetime, running: list[dict]) -> list[dict]:
    """The jobs whose pairs a scrape shows: those running and those that ended in the last RECENT_S
    seconds, newest first, at most MAX_JOBS; with what says whether their bytes can still change."""
    j = S.jobs
    since = now - timedelta(seconds=RECENT_S)
    with store.engine.connect() as c:
        ended = c.execute(sa.select(j.c.id, j.c.meta, j.c.state, j.c.ended, j.c.exit_status, j.c.heartbeat)
                          .where(j.c.ended >= since).order_by(j.c.id.desc()).limit(MAX_JOBS)).mappings().all()
    rows = {int(r["id"]): {**dict(r), "running": False} for r in ended}
    for r in running:
        rows[int(r["id"])] = {**r, "running": True}
    return [rows[k] for k in sorted(rows, reverse=True)[:MAX_JOBS]]


class Exposition:
    """``/metrics`` of one store, with the pairs of jobs that no longer run kept between scrapes.

    A job that has ended has its final bytes stored: its heaviest pairs are read once and kept,
    keyed by what would say otherwise (its state, end, exit status and last write, and the share
    of series it got), so a scrape reads the store for the running jobs only. Jobs that leave the
    scrape's window are dropped from the cache."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._kept: dict[int, tuple[tuple, tuple[PairRows, int]]] = {}
        self._lock = threading.Lock()

    def pair_metrics(self, now: datetime | None = None, running: list[dict] | None = None) -> list[str]:
        """``rankmap_pair_bytes_total`` of running jobs and of jobs that ended in the last RECENT_S seconds."""
        store = self.store
        now = now or datetime.now(timezone.utc)
        running = _running(store) if running is None else running
        jobs = _pair_jobs(store, now, running)
        if not jobs:
            return []
        limit = max(1, min(MAX_PAIR_SERIES, MAX_PAIR_SERIES_TOTAL // len(jobs)))
        key = {int(j["id"]): (str(j["state"]), str(j.get("ended")), j.get("exit_status"), str(j.get("heartbeat")), limit)
               for j in jobs}
        with self._lock:
            kept = {jid: got for jid, (k, got) in self._kept.items() if key.get(jid) == k}
        fresh = _heaviest_pairs(store, [jid for jid in key if jid not in kept], limit)
        with self._lock:
            self._kept = {jid: v for jid, v in self._kept.items() if jid in key}
            for j in jobs:
                jid = int(j["id"])
                if not j["running"] and jid in fresh:
                    self._kept[jid] = (key[jid], fresh[jid])
        lines, omitted = [], []
        for j in sorted(jobs, key=lambda j: int(j["id"])):
            jid = int(j["id"])
            top, n = kept.get(jid) or fresh[jid]
            if n > len(top):
                omitted.append((jid, n - len(top)))
            lab = job_labels({"id": jid, "meta": j.get("meta")})
            lines += [f"rankmap_pair_bytes_total{_labels(job=jid, src=s, dst=d, **{'class': k}, **lab)} {b}"
                      for s, d, k, b in sorted(top, key=lambda r: r[:3])]
        if not lines:
            return []
        out = ["# HELP rankmap_pair_bytes_total Bytes rank src sent to rank dst, by traffic class.",
               "# TYPE rankmap_pair_bytes_total counter", *lines]
        if omitted:
            out += [f"# HELP rankmap_pair_series_omitted Pair series of the job not exposed (only the heaviest "
                    f"{limit} are: at most {MAX_PAIR_SERIES} a job, {MAX_PAIR_SERIES_TOTAL} in all).",
                    "# TYPE rankmap_pair_series_omitted gauge",
                    *(f"rankmap_pair_series_omitted{_labels(job=jid)} {n}" for jid, n in omitted)]
        return out

    def render(self) -> str:
        """The whole exposition, newline-terminated."""
        running = _running(self.store)
        return "\n".join(link_metrics(self.store, running=running) + self.pair_metrics(running=running)) + "\n"


def pair_metrics(store: Store, now: datetime | None = None) -> list[str]:
    """``rankmap_pair_bytes_total`` of a store, read afresh (:meth:`Exposition.pair_metrics`)."""
    return Exposition(store).pair_metrics(now)


def render(store: Store) -> str:
    """The whole exposition, newline-terminated, read afresh."""
    return Exposition(store).render()
