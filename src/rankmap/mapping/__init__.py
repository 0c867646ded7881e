"""Placement: the congestion cost model, the solvers, and launching a job on a mapping.

``platform`` (route incidence arrays), ``cost`` (scoring), ``problem`` / ``exact`` / ``heuristic`` /
``automorph`` (node solvers), ``solve`` (one or many nodes), ``traffic`` and ``inputs`` (what the verbs
read), ``report`` (mapping JSON and tables), ``launch`` and ``execwrap`` (running on a mapping),
``simgrid`` (the independent judge), ``patterns`` and ``synth`` (synthetic traffic and topologies),
``basis`` (the traffic as recorded or the GPU-resident what-if). See docs/placement.md.
"""
