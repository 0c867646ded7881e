"""What every router of the dashboard shares: the store, the topologies offered, and the steps
several endpoints take (a job from its id, the placement of its ranks, the mapping hint).

One :class:`Dashboard` lives on ``app.state``; the routers reach it through :func:`dashboard`,
so an endpoint names what it needs in its signature and nothing is module-global.
"""

from __future__ import annotations

import shlex
import threading
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request

from rankmap.errors import RankmapError, verb
from rankmap.formats.record import CLASSES
from rankmap.mapping.cost import Traffic
from rankmap.store import Store, StoreUnavailable
from rankmap.topology import Topology
from rankmap.web import cluster as C
from rankmap.web import metrics as M
from rankmap.web import queries as Q
from rankmap.web import topoview as V
from rankmap.web import utilisation as U

PLACEMENTS = "^(auto|default|mapped)$"  # ``placement=``: the job's own (auto), r mod G, its mapping


class Topologies:
    """Topologies by spec, loaded once: live discovery costs an NVML walk, fixtures a JSON parse.

    A spec that fails is remembered with its message, so a page polling every two seconds does
    not retry a discovery that cannot succeed on this machine.
    """

    def __init__(self, default: str | None) -> None:
        self.default = default or "live"
        self._cache: dict[str, Topology | RankmapError] = {}
        self._lock = threading.Lock()

    def allowed(self) -> list[str]:
        from rankmap.topology import fixtures

        return list(dict.fromkeys([self.default, "live", *fixtures.NAMES]))

    def get(self, spec: str | None, *, trusted: bool = False) -> Topology:
        """``trusted`` specs come from the store (a mapping's topology); others must be offered.

        Specs from a request are limited to the server's own, ``live`` and the fixtures, so the
        API cannot be used to read arbitrary files of the machine it runs on.
        """
        spec = spec or self.default
        if not trusted and spec not in self.allowed():
            raise HTTPException(400, f"topology {spec!r} is not offered here; choose one of "
                                     f"{', '.join(self.allowed())} or start rankmap serve with --topology")
        with self._lock:
            if spec not in self._cache:
                from rankmap.topology import load

                try:
                    self._cache[spec] = load(spec)
                except RankmapError as e:
                    self._cache[spec] = e
            t = self._cache[spec]
        if isinstance(t, RankmapError):
            hint = " (pick another topology in the page, or start rankmap serve with --topology SPEC)"
            raise HTTPException(404, f"topology {spec!r} is not available: {t}{hint}")
        return t


class Dashboard:
    """The store and the topologies of one app, with the steps its endpoints share."""

    def __init__(self, store: Store, topology_spec: str | None) -> None:
        self.store = store
        self.topologies = Topologies(topology_spec)
        self.metrics = M.Exposition(store)  # /metrics, with the pairs of ended jobs kept between scrapes

    def job_id(self, spec: str) -> int:
        """A job's id from an id or ``latest``; a job that is not stored is a 404."""
        try:
            return self.store.resolve_job(spec)
        except StoreUnavailable:
            raise
        except RankmapError as e:
            raise HTTPException(404, str(e)) from None

    @staticmethod
    def split_classes(values: list[str] | None) -> list[str]:
        """``class=`` values; a name that is no traffic class is refused (a typo would read as no traffic)."""
        out = [c for v in values or [] for c in v.split(",") if c and c != "all"]
        bad = [c for c in out if c not in CLASSES]
        if bad:
            raise HTTPException(400, f"class {bad[0]!r} is not a traffic class; choose {', '.join(CLASSES)} or all")
        return out

    @staticmethod
    def thresholds(bands: str | None) -> tuple[float, ...]:
        """``bands=``: the band edges of the link colours, in percent of bandwidth."""
        try:
            return U.parse_thresholds(bands)
        except RankmapError as e:
            raise HTTPException(400, str(e)) from None

    @staticmethod
    def view(topo: Topology, traffic: Traffic, placement: V.Placement) -> dict:
        """The link loads of ``traffic`` placed by ``placement``, with the ranks on each GPU."""
        v = V.link_loads(topo, traffic, placement)
        v["ranks_on_gpu"] = {str(g): rs for g, rs in V.ranks_on_gpus(placement, traffic.n).items()}
        return v

    def job_topology(self, jid: int, j: dict) -> dict[str, Any]:
        """The node a job's link views are drawn on when the page names none, and why that one.

        The job's own first: the node of the mapping it ran with (``rankmap run``), else of its
        newest stored mapping (the node its placement was made for); then the server's. ``spec`` is
        None when none of them loads here (``live`` without an NVIDIA driver, a mapping made for a
        node this server does not know), with ``error`` saying so: the page then asks for no link
        view at all rather than for ones that can only fail."""
        cands: list[tuple[str, bool, str]] = []
        ran = (j.get("meta") or {}).get("mapping")
        if isinstance(ran, dict) and isinstance(ran.get("topology"), str):
            cands.append((ran["topology"], True, "the node of the mapping it ran with"))
        row = Q.mapping_panel(self.store, jid, j, limit=1)["row"]
        if row is not None and row.get("topology"):
            cands.append((str(row["topology"]), True, f"the node of its mapping #{row['id']}"))
        cands.append((self.topologies.default, False, "the server's node"))
        failed = []
        for spec, trusted, why in cands:
            try:
                self.topologies.get(spec, trusted=trusted)
                return {"spec": spec, "source": why, "error": None}
            except HTTPException:
                failed.append(f"{why}, {spec!r}")
        live = " (live discovers the node through its NVIDIA driver)" if "live" in [c[0] for c in cands] else ""
        return {"spec": None, "source": None,
                "error": f"no node to draw job {jid}'s links on: {' and '.join(dict.fromkeys(failed))} "
                         f"{'does' if len(failed) == 1 else 'do'} not load here{live}. Pick a node in the topology "
                         f"selector (the built-in ones are there), or start rankmap serve with --topology SPEC"}

    def topology(self, spec: str | None, jid: int, j: dict) -> Topology:
        """The node asked for (``spec=``), else the job's own (:meth:`job_topology`)."""
        if spec:
            return self.topologies.get(spec)
        own = self.job_topology(jid, j)
        if own["spec"] is None:
            raise HTTPException(404, own["error"])
        return self.topologies.get(own["spec"], trusted=True)

    def placement_of(self, jid: int, j: dict, topo: Topology, n: int, placement: str) -> V.Placement:
        """Where the job's ranks ran on ``topo``: 'mapped' (its mapping), 'default' (r mod G), or
        'auto' (the placement its record names, else the default)."""
        mapping_used: Any = None
        where = "default"
        if placement == "mapped":
            row = Q.mapping_panel(self.store, jid, j, limit=1)["row"]
            if row is None:
                raise HTTPException(404, self.no_mapping(jid, None))
            mapping_used, where = row["mapping"], f"mapping {row['id']}"
        elif placement == "auto" and (j.get("meta") or {}).get("mapping") is not None:
            mapping_used, where = j["meta"]["mapping"], f"job {jid} meta.mapping"
        hosts = C.rank_hosts(self.store.ranks(jid), n) if mapping_used is None else None
        return V.placement_for(topo, n, mapping_used, where, hosts)

    def no_mapping(self, jid: int, spec: str | None) -> str:
        """What to run for a job without a mapping: commands that work against this very store.

        On a node that loads here (the asked-for one, the server's, else a fixture), with as many
        nodes as the job had hosts and the ranks per GPU it needs, so the command runs as given:
        ``live`` without an NVIDIA driver (a laptop, a login node) would only fail again."""
        from rankmap.store import shown_url
        from rankmap.topology import fixtures

        store, topologies = self.store, self.topologies
        db = "" if store.url == shown_url() else f" --db {shlex.quote(store.url)}"
        failed = []
        for cand in dict.fromkeys([spec or topologies.default, topologies.default, *fixtures.NAMES]):
            try:
                topo = topologies.get(cand)
                break
            except HTTPException:
                failed.append(cand)
        nodes = max(1, len(store.job(jid).get("hosts") or []))
        per_gpu = -(-store.world_size(jid) // max(1, len(topo.gpus) * nodes))
        flags = f"--topology {shlex.quote(cand)}" + (f" --nodes {nodes}" if nodes > 1 else "") + \
            (f" --ranks-per-gpu {per_gpu}" if per_gpu > 1 else "")
        why = ""
        if failed:
            others = [f"{c!r}" for c in failed if c != "live"]
            why = " (" + "; ".join(
                ([f"{', '.join(others)} {verb(len(others), 'does', 'do')} not load here"] if others else []) +
                (["live does not load here: it discovers the node it runs on through its NVIDIA driver (on the "
                  "job's node it works); anywhere, `--topology nvidia-smi-topo.txt` reads the output of "
                  "`nvidia-smi topo -m` saved on that node"] if "live" in failed else []) +
                [f"{cand} is a built-in node: `rankmap topo --list` names them all"]) + ")"
        tune = "" if cand == "live" else f" --topology {shlex.quote(cand)}"
        return (f"no mapping for job {jid}: `rankmap map --job {jid} {flags}{db} --save` places its stored profile "
                f"and stores the mapping{why}; `rankmap tune{tune}{db} -- <its command>` profiles it again and "
                f"stores one")


async def dashboard(request: Request) -> Dashboard:
    """The app's :class:`Dashboard` (async, so that FastAPI needs no worker thread to hand it over)."""
    return request.app.state.dashboard


#: an endpoint's parameter that receives the app's Dashboard
Dash = Annotated[Dashboard, Depends(dashboard)]
