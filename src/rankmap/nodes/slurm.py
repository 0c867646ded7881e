"""Slurm on emulated nodes: one ``slurmd`` per node of a :class:`~rankmap.nodes.cluster.Cluster`.

Two things stand between Slurm and network namespaces, both met and measured: ``ip netns exec``
mounts the node's own sysfs over ``/sys``, hiding the cgroup file systems that slurmd 22.05 checks
at start even with ``proctrack/linuxproc`` and ``task/none`` ("No filesystem mounted on
/sys/fs/cgroup"), and the PMIx plugin of every node makes the same ``/tmp/spmix_appdir_<uid>_<job>``
in the ``/tmp`` the nodes share ("File exists"). So each slurmd gets the machine's cgroup hierarchies
mounted again in its node's mount namespace, and ``TmpFS`` is a directory per node.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time

from rankmap.nodes.cluster import Cluster, _sh
from rankmap.errors import RankmapError


def start(c: Cluster, timeout: float = 60) -> dict[str, str]:
    """A Slurm cluster of the nodes of ``c``: ``munged`` on this machine (its socket in the state
    directory, which every node sees), ``slurmctld`` on node0 and one ``slurmd`` per node, each
    in its node's namespaces (see the module's docstring). Returns the environment ``srun`` needs
    (``SLURM_CONF``)."""
    import pwd

    for tool in ("munged", "slurmctld", "slurmd", "srun"):
        if shutil.which(tool) is None:
            raise RankmapError(f"Slurm on emulated nodes needs {tool} (Debian: slurm-wlm, munge)")
    try:
        munge = pwd.getpwnam("munge")
    except KeyError:
        raise RankmapError("Slurm on emulated nodes needs the munge user (Debian: munge)") from None
    d = c.state / "slurm"
    for sub in ("", "ctld", *(f"{k}-{n.name}" for n in c.nodes for k in ("d", "tmp"))):
        (d / sub).mkdir(parents=True, exist_ok=True)
    os.chown(d, munge.pw_uid, munge.pw_gid)
    sock = d / "munge.socket"
    _sh(["runuser", "-u", "munge", "--", "munged", "--socket", str(sock), "--pid-file", str(d / "munged.pid"),
         "--log-file", str(d / "munged.log"), "--seed-file", str(d / "munged.seed")])
    conf = d / "slurm.conf"
    conf.write_text("\n".join([
        f"ClusterName={c.tag}", "SlurmctldHost=node0", "SlurmUser=root",
        "AuthType=auth/munge", f"AuthInfo=socket={sock}", "CredType=cred/munge",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU", "MpiDefault=none", "ReturnToService=2",
        f"StateSaveLocation={d}/ctld", f"SlurmdSpoolDir={d}/d-%n", f"SlurmctldPidFile={d}/ctld.pid",
        f"SlurmdPidFile={d}/d-%n.pid", f"SlurmctldLogFile={d}/ctld.log", f"SlurmdLogFile={d}/d-%n.log",
        f"TmpFS={d}/tmp-%n",
        f"NodeName=node[0-{c.count - 1}] CPUs={len(os.sched_getaffinity(0))} State=UNKNOWN",
        "PartitionName=nodes Nodes=ALL Default=YES MaxTime=INFINITE State=UP", ""]))
    env = {"SLURM_CONF": str(conf)}
    log = open(d / "daemons.out", "ab")
    c.popen(0, ["slurmctld", "-D", "-f", str(conf)], env=env, stdout=log, stderr=subprocess.STDOUT)
    cgroups = ("mount -t tmpfs none /sys/fs/cgroup || exit 1; "
               "for c in cpuset cpu cpuacct memory devices freezer pids; do mkdir -p /sys/fs/cgroup/$c; "
               "mount -t cgroup -o $c cgroup /sys/fs/cgroup/$c 2>/dev/null; done; "
               "mkdir -p /sys/fs/cgroup/systemd /sys/fs/cgroup/unified; "
               "mount -t cgroup -o none,name=systemd cgroup /sys/fs/cgroup/systemd 2>/dev/null; "
               "mount -t cgroup2 none /sys/fs/cgroup/unified 2>/dev/null; ")
    for n in c.nodes:
        c.popen(n.index, ["sh", "-c", cgroups + f"exec slurmd -D -f {shlex.quote(str(conf))}"], env=env,
                   stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + timeout
    while time.time() < deadline:
        p = c.run(0, ["sinfo", "-h", "-o", "%T"], env=env, timeout=30)
        states = p.stdout.split()
        if states and all(st == "idle" for st in states):
            return env
        time.sleep(0.5)
    tail = (d / "daemons.out").read_text(errors="replace").strip().splitlines()[-3:]
    raise RankmapError(f"Slurm on emulated nodes: the nodes did not come up in {timeout:.0f} s "
                       f"({'; '.join(tail) or p.stderr.strip()})")
