"""``rankmap tune``'s steps: profile the job unless a profile of it is stored, place it and store
the mapping (the steps of ``rankmap map``, :mod:`rankmap.pipeline.map`).

Kept out of the verb module so that scripts and tests run the same steps; the verb only parses
options and prints.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from rankmap.errors import RankmapError


def world_size_of(cmd: Sequence[str]) -> int:
    """The ranks ``cmd`` starts, as its launcher's options say; a command that does not say is an error."""
    from rankmap.capture.launchers import recognise

    ws = recognise(list(cmd)).world_size
    if ws is None:
        raise RankmapError(f"cannot tell how many ranks `{shlex.join(cmd)}` starts: give the launcher -np/-n N")
    return ws


@dataclass
class TuneResult:
    job_id: int          # the profile the placement was made from
    profiled: bool       # False when a stored profile was used
    mapping_id: int
    doc: dict            # the mapping JSON


def tune(cmd: Sequence[str], store: Any, *, world_size: int, force: bool = False,
         log: Callable[[str], None] = print, **solver: Any) -> TuneResult:
    """Profile ``cmd`` (unless ``force`` is off and a profile of the same command and size is stored),
    place its traffic with the ``solver`` options of :func:`rankmap.pipeline.map.place`, and store the mapping."""
    from rankmap.mapping.traffic import job_traffic
    from rankmap.pipeline.map import place, store_mapping
    from rankmap.store import command_key

    cmd = list(cmd)
    key = command_key(cmd)
    jid = None if force else store.find_job(key, world_size)
    profiled = jid is None
    if jid is None:
        from rankmap.pipeline.profile import profile_command

        res = profile_command(cmd, store=store, progress=False)
        if res.exit_status != 0:
            raise RankmapError(f"the profiling run of job {res.job_id} failed (exit status {res.exit_status}): "
                               f"fix the command, then tune again")
        jid = res.job_id
        log(f"profiled as job {jid}")
    else:
        log(f"using the stored profile of job {jid} (--force profiles again)")
    traffic = job_traffic(store, jid)  # host-staged bytes kept apart: they are routed via the host
    if traffic.n != world_size:
        raise RankmapError(f"the profile of job {jid} has {traffic.n} ranks but the command starts {world_size}: "
                           f"profile this rank count (rankmap tune --force -- ...)")
    if traffic.total == 0:
        raise RankmapError(f"job {jid} recorded no traffic between ranks: nothing to place")
    doc = place(traffic, source={"job": jid, "command": cmd}, **solver)
    mid = store_mapping(store, doc, jid, key=key, world_size=world_size)
    return TuneResult(jid, profiled, mid, doc)
