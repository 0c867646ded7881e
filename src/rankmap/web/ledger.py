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

from rankmap.mapping.cost import Traffic
from rankmap.topology import Topology
from rankmap.web import topoview as V
from rankmap.web import utilisation as U

TOP = 3
MAX_PAIRS = 512   # pairs routed one by one for the attribution (the heaviest; the rest only in the totals)


def ledger(store: Any, job: dict, topo: Topology, placement: V.Placement, traffic: Traffic) -> dict[str, Any]:
    """Per link of ``topo``: measured, explained, the top pairs and the unexplained bytes, both directions."""
    shown, _off = V.on_node(traffic, placement)
    gpu = np.asarray(placement.gpu[:traffic.n], dtype=np.int64)
    # the heaviest pairs, each a group of its own, routed in one pass; the rest only in the totals
    top = np.argsort(-shown.bytes, kind="stable")[:MAX_PAIRS]
    group = np.full(len(shown.bytes), len(top), dtype=np.int64)
    group[top] = np.arange(len(top))
    per = V.directed_loads(topo, shown, gpu, group, len(top) + 1)
    total = per.sum(axis=0)
    share = [(int(shown.src[i]), int(shown.dst[i]), per[k]) for k, i in enumerate(top)]
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
