"""Which mirror of its MPI library's collective selection applies to a job, from a record's META."""

from __future__ import annotations

from rankmap.errors import RankmapError
from rankmap.formats.conformance_json import Build
from rankmap.pairs import conformance, mpich, ompi
from rankmap.pairs.call import Call
from rankmap.pairs.mirror import Mirror, Mirrored

_MODULES = {"Open MPI": ompi, "MPICH": mpich}


def probe_name(c: Call) -> str:
    """The conformance probe's name of a call's collective (``iallreduce``); a persistent form's is
    ``allreduce_init``, which the probe does not run."""
    return {"blocking": c.kind, "nonblocking": "i" + c.kind}.get(c.form, f"{c.kind}_init")


class Verified:
    """A mirror narrowed to what a conformance record of the job's library build found: the
    collectives it reproduced exactly keep the mirror, the others it checked get the model, and
    those it did not check keep the mirror only where ``unchecked`` (the mirror's own release)."""

    def __init__(self, inner: Mirror, build: Build, unchecked: bool):
        self.inner, self.build, self.unchecked = inner, build, unchecked
        self.exact = frozenset(build.exact)
        self.checked = self.exact | frozenset(build.inexact)
        rest = "the model for the rest" if not unchecked else \
            (f"the model for {', '.join(sorted(build.inexact))}" if build.inexact else "")
        self.note = (f"{inner.note}, for the {len(self.exact)} collectives rankmap doctor --collectives found "
                     f"exact on {build.name} {build.version} ({build.checked[:10]})" + (f"; {rest}" if rest else ""))

    def messages(self, c: Call, nodes: tuple[int, ...] | None = None) -> Mirrored | None:
        name = probe_name(c)
        if name in self.exact or (self.unchecked and name not in self.checked):
            return self.inner.messages(c, nodes)
        return None


class Library:
    """Which mirror applies to a record, from its META (library version, control variables).

    The releases each mirror follows are the data of its module (``ompi.RELEASES``,
    ``mpich.RELEASES``). A library build that ``rankmap doctor --collectives`` checked (the
    conformance file of rankmap's home, :mod:`.conformance`) gets the mirror of the release it was
    found to follow, for the collectives it reproduced exactly; an exact release needs no check.
    Any other version, or a job whose collectives another component runs, gets the model."""

    def __init__(self, meta: dict[str, str], source: str | None = None):
        lib = meta.get("mpi_library", "")
        self.name = lib
        want = source or meta.get("collectives.requested", "auto")
        self.mirror: Mirror | None = None
        self.note = ""
        if want == "model":
            self.note = "model requested (RANKMAP_COLLECTIVES=model)"
            return
        nv = conformance.name_version(lib)
        if nv is None:
            self.note = f"no mirror for {lib.split(',')[0] or 'this MPI'}; the model applies"
            return
        mod = _MODULES[nv[0]]
        release = conformance.release_of(nv[1])
        try:
            build = conformance.find(meta)
        except RankmapError as e:
            build, problem = None, f" (the conformance file is unreadable: {e})"
        else:
            problem = ""
        known = release in mod.RELEASES
        if build is not None and build.release in mod.RELEASES:
            mirror, note = mod.mirror_from_meta(meta, build.release)
            if mirror is not None:
                self.mirror = Verified(mirror, build, unchecked=known and build.release == release)
                self.note = self.mirror.note
            else:
                self.note = note
        elif known:
            self.mirror, self.note = mod.mirror_from_meta(meta, release)
            self.note += problem
        else:
            self.note = (f"no mirror for {nv[0]} {nv[1]} (its releases: "
                         f"{', '.join(f'{a}.{b}' for a, b in mod.RELEASES)}); the model applies until "
                         f"rankmap doctor --collectives checks this build{problem}")
