"""File formats: one module owns each format rankmap reads or writes.

``record`` (the per-rank record files the native hooks write; layout declared once in
``native/common/rmrec_layout.h``), ``traffic_csv`` (the traffic matrix as ``rankmap export``
writes it and ``rankmap map --traffic`` reads it), ``mapping_json`` (a placement, as ``tune`` /
``map`` write it and ``run``, the exec wrapper and the dashboard read it) and ``topology_json``
(a node's topology). Each module turns bytes into typed data and back, checks what it reads and
names the file and the place of any fault; none knows where the data goes next.

This package imports nothing at import time: the exec wrapper loads ``mapping_json`` from a
bare ``python -S`` and must not pay for numpy.
"""
