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

Bounded: at most ``MAX_JOBS`` jobs, and per job the ``MAX_PAIR_SERIES`` heaviest pair series (a
job of thousands of ranks would otherwise expose millions); ``rankmap_pair_series_omitted{job}``
says how many were left out.

Which samples: for every host and GPU, the newest sample of any running sampler (a
``rankmap monitor`` session, or a ``rankmap profile`` that samples), if it is recent; a GPU whose
sampler stopped is left out rather than shown frozen. Which jobs: those running, and those that
ended in the last ``RECENT_S`` seconds, so that a scrape still sees their final totals.
"""

from __future__ import annotations

import re
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import sqlalchemy as sa

from rankmap.store import Store
from rankmap.store import schema as S
from rankmap.web.utilisation import sampler_t0_ns

RECENT_S = 600
STALE_S = 10.0
MAX_JOBS = 64
MAX_PAIR_SERIES = 2048      # per job: the heaviest (src, dst, class) series
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
    whose rankmap died has no exit status either, and is ``incomplete``)."""
    j = S.jobs
    with store.engine.connect() as c:
        ids = c.execute(sa.select(j.c.id).where(j.c.exit_status.is_(None), j.c.state == "running")
                        .order_by(j.c.id.desc()).limit(MAX_JOBS)).scalars().all()
    return [job for job in map(store.job, ids) if job["state"] == "running"]


def _last_two(store: Store, job_id: int) -> dict[tuple[int, str], list[dict]]:
    """The two newest samples of every (GPU, link) of a job."""
    t = S.link_samples
    with store.engine.connect() as c:
        top = c.execute(sa.select(sa.func.max(t.c.t_ns)).where(t.c.job == job_id)).scalar()
        if top is None:
            return {}
        # two samples back of even the slowest sampler: an hour (the longest interval) is plenty
        rows = c.execute(sa.select(t).where(t.c.job == job_id, t.c.t_ns >= top - 7_200 * 10**9)
                         .order_by(t.c.t_ns.desc()).limit(4096)).mappings().all()
    out: dict[tuple[int, str], list[dict]] = {}
    for r in rows:
        lst = out.setdefault((int(r["device"]), str(r["link"])), [])
        if len(lst) < 2:
            lst.append(dict(r))
    return out


def link_metrics(store: Store, now_ns: int | None = None) -> list[str]:
    """The dcgm-exporter rate gauges and rankmap's cumulative link counters of running samplers."""
    now_ns = now_ns or time.time_ns()
    cands: dict[tuple[str, int], dict[int, tuple]] = {}  # (host, gpu) -> job id -> (prefer, job, gpu, links)
    for job in _running(store):
        t0 = sampler_t0_ns(job)
        if t0 is None:
            continue
        meta = job.get("meta") or {}
        info = meta.get("monitor") or meta.get("link_sampler") or {}
        host = info.get("host") or (job.get("hosts") or ["unknown"])[0]
        gpus = {int(g["index"]): g for g in info.get("gpus") or []}
        interval = float(info.get("interval_ms") or 100) / 1000
        for (dev, link), rows in _last_two(store, int(job["id"])).items():
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


def pair_metrics(store: Store, now: datetime | None = None) -> list[str]:
    """``rankmap_pair_bytes_total`` of running jobs and of jobs that ended in the last RECENT_S seconds."""
    now = now or datetime.now(timezone.utc)
    j, t = S.jobs, S.traffic
    since = now - timedelta(seconds=RECENT_S)
    with store.engine.connect() as c:
        ended = c.execute(sa.select(j.c.id).where(j.c.ended >= since).order_by(j.c.id.desc())
                          .limit(MAX_JOBS)).scalars().all()
    ids = sorted({*ended, *(job["id"] for job in _running(store))}, reverse=True)[:MAX_JOBS]
    if not ids:
        return []
    total = sa.func.sum(t.c.bytes).label("b")
    rows, omitted = [], []
    with store.engine.connect() as c:
        metas = dict(c.execute(sa.select(j.c.id, j.c.meta).where(j.c.id.in_(ids))).all())
        for jid in sorted(ids):
            keys = (t.c.src, t.c.dst, t.c["class"])
            q = sa.select(*keys, total).where(t.c.job == jid).group_by(*keys)
            top = c.execute(q.order_by(total.desc(), *keys).limit(MAX_PAIR_SERIES + 1)).all()
            if len(top) > MAX_PAIR_SERIES:
                n = c.execute(sa.select(sa.func.count()).select_from(q.subquery())).scalar()
                omitted.append((jid, int(n) - MAX_PAIR_SERIES))
                top = top[:MAX_PAIR_SERIES]
            labels = job_labels({"id": jid, "meta": metas.get(jid)})
            rows += [(jid, labels, s, d, k, b) for s, d, k, b in sorted(top, key=lambda r: r[:3])]
    if not rows:
        return []
    out = ["# HELP rankmap_pair_bytes_total Bytes rank src sent to rank dst, by traffic class.",
           "# TYPE rankmap_pair_bytes_total counter",
           *(f"rankmap_pair_bytes_total{_labels(job=jid, src=s, dst=d, **{'class': k}, **lab)} {int(b or 0)}"
             for jid, lab, s, d, k, b in rows)]
    if omitted:
        out += [f"# HELP rankmap_pair_series_omitted Pair series of the job not exposed (only the {MAX_PAIR_SERIES} "
                f"heaviest are).", "# TYPE rankmap_pair_series_omitted gauge",
                *(f"rankmap_pair_series_omitted{_labels(job=jid)} {n}" for jid, n in omitted)]
    return out


def render(store: Store) -> str:
    """The whole exposition, newline-terminated."""
    return "\n".join(link_metrics(store) + pair_metrics(store)) + "\n"
