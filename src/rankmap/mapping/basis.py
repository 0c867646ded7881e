"""The basis of a placement: the traffic as recorded, or the what-if of GPU-resident buffers.

A profile taken with an MPI that is not CUDA-aware (Debian's Open MPI and MPICH, the PyPI wheels)
records host-staged bytes: GPU -> host memory -> GPU, over PCIe and the CPU links, where no rank
order can help. ``--as-gpu-resident`` asks what the same bytes would cost if they stayed in GPU
memory and went GPU to GPU over the node's links, as a CUDA-aware MPI or NCCL carries them. That is
an assumption about another run, not a fact of this one, so every mapping document carries its
basis (``traffic_basis``, and ``assumption`` in words when it is the what-if) and every report
prints it: a what-if is never shown or stored as if it were what the job did.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rankmap.errors import RankmapError
from rankmap.mapping.cost import Traffic
from rankmap.mapping.units import amount

#: the memory kinds (of a send buffer, as the hooks record them) whose bytes were staged through host
#: memory: routed GPU -> host -> GPU. Device, managed and unknown buffers are routed peer to peer.
HOST_STAGED_MEM = frozenset({"host"})

AS_RECORDED = "as-recorded"
GPU_RESIDENT = "gpu-resident"
BASES = (AS_RECORDED, GPU_RESIDENT)
# each basis in words, for the readers that label a mapping's figures with it (the dashboard)
LABELS = {AS_RECORDED: "as recorded", GPU_RESIDENT: "what-if: GPU-resident"}


def host_staged(mem: str | None) -> bool:
    """Whether bytes sent from a buffer of memory kind ``mem`` went through host memory: the one rule
    that splits a job's (or a traffic CSV's) bytes into host-staged and peer-to-peer ones."""
    return mem in HOST_STAGED_MEM


def routed(basis: str, traffic: Traffic) -> Traffic:
    """``traffic`` as the cost model routes it on ``basis``, for the readers that draw or score it:
    as recorded, its host-staged part via the host; on the GPU-resident what-if, every byte GPU to
    GPU. Unlike :func:`gpu_resident`, traffic without host-staged bytes is no error here: there is
    simply nothing to move. A basis this version does not know is refused (its traffic cannot be
    rebuilt, see :func:`stated`)."""
    if basis == AS_RECORDED:
        return traffic
    if basis == GPU_RESIDENT:
        return replace(traffic, host=None)
    raise RankmapError(f"unknown traffic basis {basis!r} (one of {', '.join(BASES)})")


def gpu_resident(traffic: Traffic, what: str) -> Traffic:
    """``traffic`` with its host-staged part counted as peer-to-peer (every byte GPU to GPU).

    ``what`` names the traffic for the error raised when nothing in it is host-staged: the what-if
    would then be the recorded traffic under a misleading label (a CSV without its ``mem`` column,
    for one, says nothing about where buffers lived, and is already placed GPU to GPU).
    """
    if traffic.host is None or traffic.host_total <= 0:
        raise RankmapError(f"{what} has no host-staged bytes, so --as-gpu-resident would change nothing: "
                           f"its traffic is already placed GPU to GPU")
    return replace(traffic, host=None)


def fields(basis: str, recorded: Traffic | None = None) -> dict[str, Any]:
    """The mapping JSON's basis fields; ``recorded`` (the traffic before the what-if) gives the bytes
    the what-if moved off the host route."""
    if basis not in BASES:
        raise RankmapError(f"unknown traffic basis {basis!r} (one of {', '.join(BASES)})")
    if basis == AS_RECORDED:
        return {"traffic_basis": AS_RECORDED, "assumption": None}
    staged = recorded.host_total if recorded is not None else 0.0
    return {"traffic_basis": GPU_RESIDENT,
            "assumption": (f"what-if: the {amount(staged)} recorded as host-staged are counted as "
                           f"GPU-resident, carried GPU to GPU over the node's links as a CUDA-aware MPI or "
                           f"NCCL would; the recorded job did not move them that way"),
            "recorded_host_staged_bytes": staged}


def apply(basis: str, traffic: Traffic, what: str) -> tuple[Traffic, dict[str, Any]]:
    """The traffic to place on ``basis`` and the mapping JSON's basis fields for it: the recorded
    traffic as it is, or its GPU-resident what-if (``what`` names it, see :func:`gpu_resident`)."""
    placed = gpu_resident(traffic, what) if basis == GPU_RESIDENT else traffic
    return placed, fields(basis, traffic)


def is_what_if(doc: dict) -> bool:
    """Whether a mapping document's figures rest on an assumption rather than on the recorded run: the
    GPU-resident what-if, or a basis this version does not know (never taken for the recorded run).
    One rule for every reader: :func:`stated` decides."""
    return stated(doc)["what_if"]


def assumption_text(doc: dict) -> str:
    """The words a reader prints for a what-if document: its own assumption, or, for a basis this
    version does not know (and a document that states none), what can be said of it."""
    st = stated(doc)
    if st["assumption"]:
        return st["assumption"]
    return (f"traffic basis {st['traffic_basis']!r}, which this version of rankmap does not know: its figures "
            f"rest on an assumption it cannot state")


def stated(doc: Any) -> dict[str, Any]:
    """The basis a stored mapping document states, for readers that show it beside its figures (the
    dashboard): ``traffic_basis``, ``assumption`` (None when as recorded), ``label`` (its words),
    ``what_if`` (whether the figures rest on an assumption rather than on the recorded run) and
    ``known`` (whether this version can load the traffic on that basis, so draw what the solver saw).

    A document without the field (stored before mappings carried it, or a bare placement written by
    another tool) is as recorded: nothing was assumed when it was made. A basis this version does not
    know is passed on under its own name, counted as a what-if, so that it is never shown as the
    recorded run, and not ``known``: its figures were computed on traffic this version cannot
    rebuild, so a reader shows them as stored rather than redrawing them on another basis.
    """
    b = doc.get("traffic_basis") if isinstance(doc, dict) else None
    if b is None or b == AS_RECORDED:
        return {**fields(AS_RECORDED), "label": LABELS[AS_RECORDED], "what_if": False, "known": True}
    b, a = str(b), doc.get("assumption")
    return {"traffic_basis": b, "assumption": None if a is None else str(a),
            "label": LABELS.get(b, f"basis: {b}"), "what_if": True, "known": b in BASES}
