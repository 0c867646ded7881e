"""Rank pairs from the facts a job recorded: which source applies to its collectives, and the rows.

Three sources, best first (docs/collective-models.md):

* ``library`` -- rows the shim took from the MPI library's own per-message accounting (Open MPI's
  monitoring PML); they are already in the record, and facts flagged as measured get no rows here;
* ``mirror`` -- the library's algorithm selection followed (:mod:`.ompi` for Open MPI 4.1's and
  5.0's coll/tuned, :mod:`.mpich` for MPICH 4.0), from the facts and the control variables the shim
  read through MPI_T;
* ``model`` -- a fixed algorithm per collective (:mod:`.model`) where neither applies.

:func:`derive` (:mod:`.derive`) turns one rank's facts into send rows (the traffic matrix uses
the sender's view) and timeline rows; ``RANKMAP_COLLECTIVES=model`` or ``mirror`` in the job's
environment (recorded in META) narrows the choice; :class:`Library` (:mod:`.library`) picks the
mirror, each an implementation of :class:`~rankmap.pairs.mirror.Mirror`. The NCCL side is
:mod:`.nccl_model` over :mod:`.nccl_graph`; :mod:`.probe` runs the conformance probes that check a
mirror against the library's own accounting.
"""

from rankmap.pairs.derive import LABELS, DerivedRow, apply, call_of, derive, node_index, read_dir, run_hosts
from rankmap.pairs.library import Library

__all__ = ["LABELS", "DerivedRow", "Library", "apply", "call_of", "derive", "node_index", "read_dir", "run_hosts"]
