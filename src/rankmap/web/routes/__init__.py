"""The dashboard's endpoints, one router per concern; :func:`rankmap.web.app.create_app` includes them.

``page`` (the page, plotly.js, the static files), ``jobs`` (the list and one job), ``job_data``
(a job's traffic, operations, timeline, CUDA activity, link counters, MPI_T variables), ``links``
(the node drawn with a job's link loads, their use over time, the link ledger, the nodes of a
multi-node job), ``mapping`` (a job's mapping panel), ``machine`` (the ``rankmap bench`` results
of the machine page), ``metrics`` (Prometheus). What the store's outages answer is not here: it
is one place, in :mod:`rankmap.web.app`.
"""
