"""Emulated nodes on one machine (network namespaces joined by a shaped bridge), for measuring
placement across nodes where no cluster is at hand: :mod:`.cluster`, :mod:`.slurm`."""
