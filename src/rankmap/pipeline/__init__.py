"""Orchestration: the verbs' multi-step work, above capture, store and mapping.

``profile`` (launch a job with capture injected, stream its records into the store), ``ingest``
(bring a run directory's record files into the store, resumably), ``tune`` (profile unless
cached, place, store the mapping), ``monitor`` (sample the node's link counters into the store on
their own) and ``demo``. The layers below never import this one.
"""
