"""MPICH 4.0 collective selection, as data.

The selection trees are MPICH's own JSON tuning files as MPICH ships them (``mpich_tuning/4.0/``,
its README says where from): ``mpir/generic.json`` for the MPIR algorithms, ``ch4/generic.json``
for the CH4 device's compositions, ``ch4/posix_generic.json`` for its POSIX shared-memory
module. :func:`tree_from_json` reads one into the form :func:`rankmap.pairs.mpich.select` walks:
a list of entries tried in order, ``(condition, subtree)``, or a leaf string
``algorithm=<function>`` / ``composition=<function>``. A job's own tuning file (the
``MPIR_CVAR_*_TUNING_JSON_FILE`` control variables) is read the same way.

:data:`CVAR_ALGORITHMS` holds the value names of the ``MPIR_CVAR_<COLL>_INTRA_ALGORITHM`` control
variables in the order of their enumeration (MPICH v4.0.x, ``src/mpi/coll/cvars.txt``): MPI_T
reports the number, this table names it.
"""

from __future__ import annotations

import json
from pathlib import Path

#: MPICH 4.0's tuning files (the same in 4.0.0 to 4.0.3)
TUNING = Path(__file__).resolve().parent / "mpich_tuning" / "4.0"


def tree_from_json(text: str | None, default: list | None = None) -> list | None:
    """A selection tree from an MPICH tuning file's text; ``default`` when there is none or it is
    not a JSON object (MPICH then keeps its compiled-in tree)."""
    if not text:
        return default
    try:
        d = json.loads(text)
    except ValueError:
        return default
    if not isinstance(d, dict):
        return default

    def compact(n: dict) -> list:
        return [k if k.startswith(("algorithm=", "composition=")) else (k, compact(v)) for k, v in n.items()]
    return compact(d)


def _shipped(name: str) -> list:
    return tree_from_json((TUNING / name).read_text(), [])


MPIR_TREE = _shipped("mpir/generic.json")
CH4_TREE = _shipped("ch4/generic.json")
POSIX_TREE = _shipped("ch4/posix_generic.json")

CVAR_ALGORITHMS = {'allgather': ['auto', 'brucks', 'nb', 'recursive_doubling', 'ring'],
 'allgatherv': ['auto', 'brucks', 'nb', 'recursive_doubling', 'ring'],
 'allreduce': ['auto', 'nb', 'smp', 'recursive_doubling', 'reduce_scatter_allgather'],
 'alltoall': ['auto', 'brucks', 'nb', 'pairwise', 'pairwise_sendrecv_replace', 'scattered'],
 'alltoallv': ['auto', 'nb', 'pairwise_sendrecv_replace', 'scattered'],
 'alltoallw': ['auto', 'nb', 'pairwise_sendrecv_replace', 'scattered'],
 'barrier': ['auto', 'nb', 'smp', 'dissemination'],
 'bcast': ['auto', 'binomial', 'nb', 'smp', 'scatter_recursive_doubling_allgather', 'scatter_ring_allgather'],
 'exscan': ['auto', 'nb', 'recursive_doubling'],
 'gather': ['auto', 'binomial', 'nb'],
 'gatherv': ['auto', 'linear', 'nb'],
 'reduce': ['auto', 'binomial', 'nb', 'smp', 'reduce_scatter_gather'],
 'reduce_scatter': ['auto', 'nb', 'noncommutative', 'pairwise', 'recursive_doubling', 'recursive_halving'],
 'reduce_scatter_block': ['auto',
                          'noncommutative',
                          'recursive_doubling',
                          'pairwise',
                          'recursive_halving',
                          'nb'],
 'scan': ['auto', 'nb', 'smp', 'recursive_doubling'],
 'scatter': ['auto', 'binomial', 'nb'],
 'scatterv': ['auto', 'linear', 'nb']}
