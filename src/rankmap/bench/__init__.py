"""Benchmarks of the machine rankmap places ranks on (layer 6): ``rankmap bench p2p|mpi|nccl``.

``p2p`` (GPU pairs, host<->GPU), ``mpi`` (OSU-style, host and device buffers, CUDA IPC) and ``nccl``
(nccl-tests' figures, next to MPI's) each build a program of ``native/bench`` once (:mod:`.build`),
run it (:mod:`.native_out` reads what it prints) and turn its raw bytes and nanoseconds into rows
(:mod:`.rows`, the one result format). :mod:`.report` prints them; :mod:`.measured` turns stored GPU-pair
figures into link strengths for the topology and the placement.
"""
