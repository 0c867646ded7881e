"""The link counters: NVLink and PCIe bytes sampled beside the job, from NVML (field values or GPM).

Kept apart from :mod:`rankmap.capture` (what goes into the job) and :mod:`rankmap.pairs` (rank
pairs from what the job recorded): the sampler reads the machine, not the job.
"""
