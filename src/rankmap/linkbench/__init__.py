"""The machine's links measured, for the topology and the placement: ``rankmap bench p2p|mpi|nccl``.

Named for what it measures: the links between GPUs, host and ranks (through the copy engines, SM
copies, MPI and NCCL), not rankmap itself, which the scripts of the repository's ``bench/`` measure.

``p2p`` (GPU pairs, host<->GPU), ``mpi`` (OSU-style, host and device buffers, CUDA IPC) and ``nccl``
(nccl-tests' figures, next to MPI's) each build a program of ``native/linkbench`` once (:mod:`.build`),
run it (:mod:`.native_out` reads what it prints) and turn its raw bytes and nanoseconds into rows
(:mod:`.rows`, the one result format). :mod:`.report` prints them; :mod:`.measured` turns stored GPU-pair
figures into link strengths for the topology and the placement.
"""
