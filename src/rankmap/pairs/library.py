"""Which mirror of its MPI library's collective selection applies to a job, from a record's META."""

from __future__ import annotations

import re

from rankmap.pairs import mpich, ompi
from rankmap.pairs.mirror import Mirror


class Library:
    """Which mirror applies to a record, from its META (library version, control variables).

    The releases each mirror follows are the data of its module (``ompi.RELEASES``,
    ``mpich.RELEASES``); any other version, or a job whose collectives another component runs,
    gets no mirror and the model."""

    def __init__(self, meta: dict[str, str], source: str | None = None):
        lib = meta.get("mpi_library", "")
        self.name = lib
        want = source or meta.get("collectives.requested", "auto")
        self.mirror: Mirror | None = None
        self.note = ""
        if want == "model":
            self.note = "model requested (RANKMAP_COLLECTIVES=model)"
            return
        for pattern, mod in ((r"Open MPI v(\d+)\.(\d+)", ompi), (r"MPICH Version:\s*(\d+)\.(\d+)", mpich)):
            m = re.search(pattern, lib)
            release = (int(m.group(1)), int(m.group(2))) if m else None
            if release in mod.RELEASES:
                self.mirror, self.note = mod.mirror_from_meta(meta, release)
                return
        self.note = f"no mirror for {lib.split(',')[0] or 'this MPI'}; the model applies"
