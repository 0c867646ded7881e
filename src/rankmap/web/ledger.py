"""The link ledger: for every link of a job, what was measured on it, what the recorded pairs explain,
which pairs those are, and the remainder nobody recorded.

**Explained** bytes are the job's pair traffic routed by the one routing rule (``Topology.route``
through the cost model's incidence, :func:`rankmap.web.topoview.directed_loads`) on the job's
placement; the **top pairs** of a link are the three rank pairs that put the most bytes on it in its
busier direction (each pair routed alone: a route is fixed, so the pairs' shares add up to the
link's load). **Measured** bytes come from the link counters where one GPU counter covers the link
alone (:func:`rankmap.web.utilisation.measured_links`: a GPU's NVSwitch bundle, a two-GPU NVLink
bridge, a GPU's PCIe uplink), the counter's last cumulative value less its first. **Unexplained** is
measured less explained, per direction: traffic the hooks did not see (another process, a library
rankmap does not capture, protocol overhead), or, negative, pairs the counters did not see.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rankmap.topology import Topology
from rankmap.web import topoview as V
from rankmap.web import utilisation as U

TOP = 3
MAX_PAIRS = 512   # pairs routed one by one for the attribution (the heaviest; the rest only in the totals)


def ledger(store: Any, job: dict, topo: Topology, placement: V.Placement, m: np.ndarray,
           host: np.ndarray | None = None) -> dict[str, Any]:
    """Per link of ``topo``: measured, explained, the top pairs and the unexplained bytes, both directions."""
    n = m.shape[0]
    src, dst = np.nonzero(m)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    b = m[src, dst].astype(np.float64)
    hb = host[src, dst].astype(np.float64) if host is not None else None
    gpu = np.asarray(placement.gpu[:n], dtype=np.int64)
    if placement.node:
        node = np.asarray(placement.node[:n])
        on = node[src] == node[dst]
        src, dst, b = src[on], dst[on], b[on]
        hb = hb[on] if hb is not None else None
    total = V.directed_loads(topo, n, src, dst, b, gpu, hb) if len(b) else np.zeros((len(topo.links), 2))
    share: list[tuple[int, int, np.ndarray]] = []
    for i in np.argsort(-b, kind="stable")[:MAX_PAIRS]:
        one = V.directed_loads(topo, n, src[i:i + 1], dst[i:i + 1], b[i:i + 1], gpu,
                               hb[i:i + 1] if hb is not None else None)
        share.append((int(src[i]), int(dst[i]), one))
    meas = U.measured(store, job, U.job_zero_ns(store, job))
    mlinks = U.measured_links(topo)
    links = []
    for li, l in enumerate(topo.links):
        row: dict[str, Any] = {"link": li, "a": l.a, "b": l.b, "kind": l.kind.value,
                               "explained_ab": int(round(total[li, 0])), "explained_ba": int(round(total[li, 1])),
                               "measured_ab": None, "measured_ba": None, "measured_as": None,
                               "unexplained_ab": None, "unexplained_ba": None}
        busier = 0 if total[li, 0] >= total[li, 1] else 1
        tops = sorted(((s, d, one[li, busier]) for s, d, one in share if one[li, busier] > 0), key=lambda t: -t[2])
        row["top_pairs"] = [{"src": s, "dst": d, "bytes": int(round(v)),
                             "direction": "ab" if busier == 0 else "ba"} for s, d, v in tops[:TOP]]
        cov = mlinks.get(li)
        ser = meas.series.get((cov[0], cov[1])) if meas and cov else None
        if ser is not None and ser[1] is not None and ser[2] is not None and len(ser[0]) > 1:
            tx, rx = float(ser[1][-1] - ser[1][0]), float(ser[2][-1] - ser[2][0])
            ab, ba = (tx, rx) if cov[2] else (rx, tx)
            row.update(measured_ab=int(round(ab)), measured_ba=int(round(ba)),
                       measured_as=f"GPU{cov[0]} {cov[1]} TX/RX counters ({meas.source})",
                       unexplained_ab=int(round(ab - total[li, 0])), unexplained_ba=int(round(ba - total[li, 1])))
        links.append(row)
    return {"job": int(job["id"]), "topology": topo.name, "placement": placement.source,
            "measured": None if meas is None else meas.source, "links": links}
