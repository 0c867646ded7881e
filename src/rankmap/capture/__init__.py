"""What goes into the job: launcher adapters, run directories, and the builds of the hooks.

What comes out of it is read above this layer: rank pairs from the records in :mod:`rankmap.pairs`,
the link counters sampled beside the job in :mod:`rankmap.counters`.
"""
