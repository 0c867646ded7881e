"""Emulated nodes on one machine: network namespaces joined by a shaped bridge, real MPI across them.

Nothing of a multi-node placement can be measured on one node, and a cluster is not always at hand.
So a :class:`Cluster` makes ``N`` nodes out of this machine's kernel:

* every node is a network namespace (``ip netns``) with its own loopback and one interface,
  ``rmnet0``, at ``10.77.0.<i+1>/24``, and a UTS namespace of its own (bound to a file, so every
  command entered into the node sees the same one) in which ``hostname`` is ``node<i>``;
* every node has a boot id of its own (a file bound over ``/proc/sys/kernel/random/boot_id``):
  UCX takes a peer with this machine's boot id for a local one, whose bytes it would then move
  through shared memory instead of the network (seen: a 2-node job's 50 MB crossed no link until
  the boot ids differed; Open MPI tells nodes apart by their daemons);
* every node has a ``/dev/shm`` of its own (``<state>/shm/<node>``, on a tmpfs the cluster mounts,
  bound over it): shared-memory segments are named by host name and job id (Open MPI's
  ``vader_segment.node0.<job>.<rank>``), and the nodes of two clusters up at once (tests in
  parallel) have the same host names; for the same reason Open MPI keeps its session directories
  (``ompi.node0.<uid>`` under the temporary directory, which the nodes share) under the cluster's
  state directory (:meth:`Cluster.mpi_env`);
* the nodes' interfaces are veth pairs whose other ends hang on one bridge in this machine's
  namespace, which has no address on it: the nodes reach each other and nothing else, and nothing
  outside them reaches them;
* every node link is shaped in both directions with ``tbf`` (uplink on the node's side, downlink
  on the bridge's side) to ``gbit`` Gbit/s, so the bridge is the non-blocking switch of rankmap's
  platform model and each node's NIC its up- and downlink; where the kernel has ``sch_netem`` a
  one-way delay of ``latency_us`` is added on the uplink (kernels without it keep the veth's own
  latency, a few microseconds, and :meth:`Cluster.measure` says what the links really do);
* names resolve through a hosts file of the nodes (``/etc/netns/<ns>/hosts``, which ``ip netns
  exec`` mounts over ``/etc/hosts`` inside the node);
* directories named in ``local`` are node-local: inside every node a private bind mount of
  ``<state>/local/<node>/<dir>`` covers the directory, as a node's own ``/tmp`` or scratch disk would,
  and :meth:`Cluster.gather` copies what the nodes wrote there, the way a user collects run
  directories after a job.

A command is run on a node by :meth:`Cluster.argv` (``nsenter`` into the node's UTS namespace, then
``ip netns exec``), with a bare environment as ``ssh`` would give it. That same step, written as a
shell script, is the remote shell of the MPI launchers (:meth:`Cluster.mpi_env`): Open MPI's
``plm_rsh_agent``, hydra's ``-launcher ssh -launcher-exec``. MPI is kept on the bridge: Open MPI
``btl tcp,vader,self`` on ``rmnet0`` (vader only between ranks of one node, which Open MPI tells
apart by their daemons), MPICH's UCX with ``UCX_TLS=tcp,self`` on ``rmnet0`` (MPICH's own shared
memory only between ranks its hydra proxy of one node started), or MPICH's libfabric ``tcp``
provider on ``rmnet0``.

It needs root (namespaces, bridges and qdiscs are the kernel's); :func:`probe` tries once and says
in one line why it cannot run here. A cluster removes what it made in :meth:`Cluster.down`, and
:func:`sweep` removes the clusters of processes that died before doing so (each cluster's state
directory names its owner).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from rankmap.errors import RankmapError

STATE_ROOT = Path(os.environ.get("RANKMAP_NODES_STATE", "/run/rankmap-nodes"))
IFACE = "rmnet0"
TAG_PREFIX = "rmn"
#: what a node's shell starts with (``ssh`` gives a login environment, not the caller's)
BARE_ENV = ("PATH", "HOME", "LANG", "TERM", "TMPDIR")


def _sh(cmd: Sequence[str], check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
    p = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise RankmapError(f"{shlex.join(cmd)}: {(p.stderr or p.stdout).strip() or f'exit {p.returncode}'}")
    return p


@functools.lru_cache(maxsize=1)
def probe() -> str | None:
    """None when emulated nodes can be made here, else why not (one line). Tried once per process:
    a namespace, a veth pair and a ``tbf`` qdisc made and removed."""
    if os.geteuid() != 0:
        return "emulated nodes need root (network namespaces, a bridge and tc qdiscs are the kernel's)"
    for tool in ("ip", "tc", "nsenter", "unshare"):
        if shutil.which(tool) is None:
            return f"emulated nodes need {tool} (Debian: iproute2, util-linux)"
    name = f"{TAG_PREFIX}probe{os.getpid() % 100000}"
    try:
        _sh(["ip", "netns", "add", name])
        try:
            _sh(["ip", "link", "add", f"{name}a", "type", "veth", "peer", "name", f"{name}b"])
            try:
                _sh(["ip", "link", "set", f"{name}b", "netns", name])
                _sh(["tc", "qdisc", "add", "dev", f"{name}a", "root", "tbf", "rate", "1gbit", "burst", "64kb",
                     "latency", "10ms"])
            finally:
                _sh(["ip", "link", "del", f"{name}a"], check=False)
        finally:
            _sh(["ip", "netns", "del", name], check=False)
    except (RankmapError, OSError, subprocess.SubprocessError) as e:
        return f"emulated nodes cannot be made here: {str(e).splitlines()[0]}"
    return None


@functools.lru_cache(maxsize=1)
def has_netem() -> bool:
    """Whether this kernel has the ``netem`` qdisc (latency); many small VM kernels do not."""
    name = f"{TAG_PREFIX}nq{os.getpid() % 100000}"
    if _sh(["ip", "link", "add", f"{name}a", "type", "veth", "peer", "name", f"{name}b"], check=False).returncode:
        return False
    try:
        return _sh(["tc", "qdisc", "add", "dev", f"{name}a", "root", "netem", "delay", "100us"],
                   check=False).returncode == 0
    finally:
        _sh(["ip", "link", "del", f"{name}a"], check=False)


@dataclass
class Node:
    index: int
    name: str        # its hostname
    ns: str          # its network namespace
    addr: str        # its address on the bridge
    uts: Path        # the file its UTS namespace is bound to
    veth: str        # the bridge's end of its link


@dataclass
class Cluster:
    """``count`` emulated nodes; :meth:`up` makes them, :meth:`down` removes them (a context manager
    does both). ``slots``: ranks per node the hostfile and topology offer; ``cpus``: the CPU of each
    slot (default: slot ``s`` on CPU ``s`` modulo this machine's CPUs)."""

    count: int = 2
    gbit: float = 1.0
    latency_us: float | None = None
    slots: int = 2
    local: tuple[str, ...] = ()
    cpus: tuple[int, ...] | None = None
    tag: str = ""
    nodes: list[Node] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.count < 1 or self.count > 250:
            raise RankmapError(f"emulated nodes: count must be 1 to 250, got {self.count}")
        if self.gbit <= 0:
            raise RankmapError(f"emulated nodes: the link rate must be positive, got {self.gbit} Gbit/s")
        self.tag = self.tag or f"{TAG_PREFIX}{_base36(os.getpid())}"
        if len(self.tag) > 10:
            raise RankmapError(f"emulated nodes: tag {self.tag!r} is longer than 10 characters")
        self.state = STATE_ROOT / self.tag
        self.bridge = f"{self.tag}b"
        ncpu = len(os.sched_getaffinity(0))
        self.cpus = tuple(self.cpus) if self.cpus else tuple(s % ncpu for s in range(self.slots))
        subnet = 77
        self.nodes = [Node(i, f"node{i}", f"{self.tag}-node{i}", f"10.{subnet}.0.{i + 1}",
                           self.state / "uts" / f"node{i}", f"{self.tag}v{i}") for i in range(self.count)]

    # ------------------------------------------------------------------ up and down
    def __enter__(self) -> "Cluster":
        return self.up()

    def __exit__(self, *exc) -> None:
        self.down()

    def up(self) -> "Cluster":
        why = probe()
        if why:
            raise RankmapError(why)
        sweep()
        from rankmap.store import process_id

        try:
            (self.state / "uts").mkdir(parents=True, exist_ok=False)
        except FileExistsError:
            raise RankmapError(f"emulated nodes {self.tag} are up already ({self.state})") from None
        (self.state / "owner").write_text(process_id())
        try:
            self._make()
        except BaseException:
            self.down()
            raise
        return self

    def _make(self) -> None:
        (self.state / "shm").mkdir()     # the nodes' /dev/shm: memory, as a node's own is
        _sh(["mount", "-t", "tmpfs", "-o", "mode=0755,size=50%", f"{self.tag}-shm", str(self.state / "shm")])
        _sh(["ip", "link", "add", self.bridge, "type", "bridge"])
        _sh(["ip", "link", "set", self.bridge, "up"])
        delay = self.latency_us if self.latency_us and has_netem() else None
        if self.latency_us and delay is None:
            self.notes.append(f"this kernel has no netem qdisc: the links are not delayed by {self.latency_us:g} us; "
                              f"their latency is the veth's own")
        hosts = "127.0.0.1 localhost\n" + "".join(f"{n.addr} {n.name}\n" for n in self.nodes)
        for n in self.nodes:
            _sh(["ip", "netns", "add", n.ns])
            _sh(["ip", "link", "add", n.veth, "type", "veth", "peer", "name", f"{self.tag}p{n.index}"])
            _sh(["ip", "link", "set", f"{self.tag}p{n.index}", "netns", n.ns])
            _sh(["ip", "-n", n.ns, "link", "set", f"{self.tag}p{n.index}", "name", IFACE])
            _sh(["ip", "-n", n.ns, "addr", "add", f"{n.addr}/24", "dev", IFACE])
            _sh(["ip", "-n", n.ns, "link", "set", IFACE, "up"])
            _sh(["ip", "-n", n.ns, "link", "set", "lo", "up"])
            _sh(["ip", "link", "set", n.veth, "master", self.bridge])
            _sh(["ip", "link", "set", n.veth, "up"])
            tbf = _tbf(self.gbit)
            if delay:   # netem first (the delay), tbf under it (the rate)
                _sh(["tc", "-n", n.ns, "qdisc", "add", "dev", IFACE, "root", "handle", "1:", "netem", "delay",
                     f"{delay:g}us"])
                _sh(["tc", "-n", n.ns, "qdisc", "add", "dev", IFACE, "parent", "1:1", "handle", "10:", *tbf])
            else:
                _sh(["tc", "-n", n.ns, "qdisc", "add", "dev", IFACE, "root", *tbf])
            _sh(["tc", "qdisc", "add", "dev", n.veth, "root", *tbf])
            etc = Path("/etc/netns") / n.ns
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text(hosts)
            (etc / "hostname").write_text(n.name + "\n")
            n.uts.touch()
            # a boot id of its own: what tells a machine from another where hostnames may repeat
            # (UCX's shared-memory transports take peers with this machine's boot id for local)
            (self.state / "local").mkdir(exist_ok=True)
            (self.state / "local" / f"{n.name}.boot_id").write_text(str(uuid.uuid4()) + "\n")
            shm = self.state / "shm" / n.name
            shm.mkdir()
            shm.chmod(0o1777)
            _sh(["unshare", f"--uts={n.uts}", "hostname", n.name])
            for d in self.local:
                (self.state / "local" / n.name / d.strip("/")).mkdir(parents=True, exist_ok=True)
        (self.state / "tmp").mkdir(exist_ok=True)
        self._write_agent()
        (self.state / "hostfile").write_text("".join(f"{n.name} slots={self.slots}\n" for n in self.nodes))
        (self.state / "machinefile").write_text("".join(f"{n.name}:{self.slots}\n" for n in self.nodes))
        (self.state / "topology.json").write_text(self.topology_json())
        (self.state / "cluster.json").write_text(json.dumps(self.describe(), indent=1) + "\n")

    def set_rate(self, gbit: float) -> None:
        """Shape every node link (both ways) to ``gbit`` Gbit/s from now on: the same job at another
        rate tells whether its time is the network's."""
        for n in self.nodes:
            parent = ["parent", "1:1", "handle", "10:"] if self.latency_us and not self.notes else ["root"]
            _sh(["tc", "-n", n.ns, "qdisc", "change", "dev", IFACE, *parent, *_tbf(gbit)])
            _sh(["tc", "qdisc", "change", "dev", n.veth, "root", *_tbf(gbit)])
        self.gbit = gbit

    # ------------------------------------------------------------------ Slurm
    def start_slurm(self, timeout: float = 60) -> dict[str, str]:
        """A Slurm cluster of these nodes (:func:`rankmap.nodes.slurm.start`); returns the
        environment ``srun`` needs."""
        from rankmap.nodes.slurm import start

        return start(self, timeout)

    def down(self) -> None:
        """Remove everything :meth:`up` made (what is already gone is skipped): the nodes' processes
        first, then namespaces, links, the bridge, the hosts files, the state directory."""
        _remove(self.tag, self.state)

    # ------------------------------------------------------------------ running on a node
    def node(self, which: int | str) -> Node:
        for n in self.nodes:
            if which in (n.index, n.name, str(n.index)):
                return n
        raise RankmapError(f"emulated nodes {self.tag}: no node {which!r} (nodes: "
                           f"{', '.join(n.name for n in self.nodes)})")

    def argv(self, which: int | str, cmd: Sequence[str], env: dict[str, str] | None = None) -> list[str]:
        """The command line that runs ``cmd`` on a node, in a bare environment (``PATH``, ``HOME``
        and such of this process, then ``env``), its node-local directories mounted."""
        n = self.node(which)
        keep = {k: os.environ[k] for k in BARE_ENV if k in os.environ}
        keep.update(env or {})
        inner = [str(self.state / "enter"), n.name, "--", *cmd]
        return ["env", "-i", *(f"{k}={v}" for k, v in keep.items()), *inner]

    def run(self, which: int | str, cmd: Sequence[str], *, env: dict[str, str] | None = None,
            timeout: float = 600, input: str | None = None, cwd: str | None = None) -> subprocess.CompletedProcess:
        """Run ``cmd`` on a node and wait (text output captured)."""
        return subprocess.run(self.argv(which, cmd, env), capture_output=True, text=True, timeout=timeout,
                              input=input, cwd=cwd)

    def popen(self, which: int | str, cmd: Sequence[str], *, env: dict[str, str] | None = None,
              **kw) -> subprocess.Popen:
        return subprocess.Popen(self.argv(which, cmd, env), **kw)

    def _write_agent(self) -> None:
        """Two scripts in the state directory: ``enter NODE -- CMD...`` (run a command on a node)
        and ``rsh [OPTIONS] NODE CMD...`` (a remote shell as the MPI launchers call ``ssh``: the
        command is one shell line, its environment bare)."""
        table = "\n".join(f"  {n.name}|{n.addr}) ns={n.ns}; uts={shlex.quote(str(n.uts))}; "
                          f"local={shlex.quote(str(self.state / 'local' / n.name))}; "
                          f"shm={shlex.quote(str(self.state / 'shm' / n.name))} ;;" for n in self.nodes)
        mounts = " ".join(shlex.quote(d) for d in self.local)
        enter = f"""#!/bin/sh
# enter NODE -- CMD...: run CMD on an emulated node (its network and UTS namespaces, a mount
# namespace of its own with its node-local directories bound)
node=$1; shift; [ "$1" = "--" ] && shift
case "$node" in
{table}
  *) echo "enter: no emulated node $node" >&2; exit 255 ;;
esac
exec {shutil.which("nsenter")} --uts="$uts" -- {shutil.which("ip")} netns exec "$ns" /bin/sh -c '
local=$1; shm=$2; shift 2
for d in {mounts}; do mkdir -p "$d" && mount --bind "$local/$d" "$d" || exit 255; done
mount --bind "$local.boot_id" /proc/sys/kernel/random/boot_id || exit 255
mount --bind "$shm" /dev/shm || exit 255
exec "$@"' enter "$local" "$shm" "$@"
"""
        rsh = f"""#!/bin/sh
# rsh [OPTIONS] NODE COMMAND...: what the MPI launchers call instead of ssh
while [ $# -gt 0 ]; do case "$1" in -l|-p|-o|-i) shift 2 ;; -*) shift ;; *) break ;; esac; done
node=$1; shift
exec env -i {" ".join(f'{k}="${k}"' for k in ("PATH", "HOME"))} {shlex.quote(str(self.state / "enter"))} "$node" -- sh -c "$*"
"""
        for name, text in (("enter", enter), ("rsh", rsh)):
            p = self.state / name
            p.write_text(text)
            p.chmod(0o755)

    # ------------------------------------------------------------------ MPI
    @property
    def hostfile(self) -> Path:
        """``node<i> slots=<slots>`` per node: Open MPI's hostfile."""
        return self.state / "hostfile"

    @property
    def machinefile(self) -> Path:
        """``node<i>:<slots>`` per node: hydra's machinefile."""
        return self.state / "machinefile"

    def link_bytes(self) -> dict[str, tuple[int, int]]:
        """Bytes every node's link has carried so far (up, down), as its qdiscs count them: what
        shows that a job's bytes crossed the bridge."""
        out = {}
        for n in self.nodes:
            up = _sh(["tc", "-n", n.ns, "-s", "qdisc", "show", "dev", IFACE], check=False).stdout
            down = _sh(["tc", "-s", "qdisc", "show", "dev", n.veth], check=False).stdout
            out[n.name] = tuple(int(m.group(1)) if m else 0 for m in (re.search(r"Sent (\d+) bytes", t)
                                                                      for t in (up, down)))
        return out

    @property
    def host_names(self) -> list[str]:
        return [n.name for n in self.nodes]

    def mpi_env(self) -> dict[str, str]:
        """What ``mpirun``/``mpiexec`` on a node need to start ranks on the others over the bridge
        (to be given to :meth:`run` with the launch command)."""
        rsh = str(self.state / "rsh")
        return {
            # Open MPI: daemons through the remote shell, MPI and its own wire-up on rmnet0 only
            "OMPI_MCA_plm_rsh_agent": rsh, "OMPI_MCA_btl": "tcp,vader,self", "OMPI_MCA_pml": "ob1",
            "OMPI_MCA_btl_tcp_if_include": IFACE, "OMPI_MCA_oob_tcp_if_include": IFACE,
            "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
            "OMPI_MCA_rmaps_base_oversubscribe": "1",
            # session directories of this cluster's own (host names repeat across clusters)
            "OMPI_MCA_orte_tmpdir_base": str(self.state / "tmp"),
            "PRTE_MCA_prte_tmpdir_base": str(self.state / "tmp"),
            # the nodes share this machine's cores: a rank waiting for the network yields its core
            "OMPI_MCA_mpi_yield_when_idle": "1",
            # PRRTE (Open MPI 5)
            "PRTE_MCA_plm_ssh_agent": rsh, "PRTE_MCA_oob_tcp_if_include": IFACE,
            # MPICH's hydra: proxies through the remote shell; UCX over TCP on rmnet0
            "HYDRA_LAUNCHER": "ssh", "HYDRA_LAUNCHER_EXEC": rsh, "HYDRA_IFACE": IFACE,
            "UCX_TLS": "tcp,sm,self", "UCX_NET_DEVICES": IFACE,
            # MPICH over libfabric (MPIR_CVAR_CH4_NETMOD=ofi where it has both): its tcp provider on rmnet0
            "FI_PROVIDER": "tcp", "FI_TCP_IFACE": IFACE,
        }

    # ------------------------------------------------------------------ the platform as rankmap sees it
    @property
    def topology_name(self) -> str:
        lat = f"-{self.latency_us:g}us" if self.latency_us and not self.notes else ""
        return f"emulated-{self.slots}slot-{self.gbit:g}gbit{lat}"

    def topology(self, latency_us: float | None = None, slot_cpus: str | None = None):
        """One of these nodes as rankmap sees it (:func:`emulated_topology`): ``latency_us`` (say,
        what :meth:`measure` found) else the delay shaped where netem shapes one; ``slot_cpus``: one
        CPU list for every slot instead of a CPU each (where the emulated nodes share so few cores
        that pinning one rank per core would measure the CPUs rather than the network)."""
        if latency_us is None and self.latency_us and not self.notes:
            latency_us = self.latency_us
        cpus = [slot_cpus] * self.slots if slot_cpus else [str(c) for c in self.cpus]
        return emulated_topology(self.slots, self.gbit, latency_us, cpus, notes=self.notes,
                                 name=self.topology_name)

    def topology_json(self) -> str:
        from rankmap.formats import topology_json

        return topology_json.dumps(self.topology())

    @property
    def topology_file(self) -> Path:
        return self.state / "topology.json"

    def describe(self) -> dict:
        return {"tag": self.tag, "nodes": [{"name": n.name, "ns": n.ns, "addr": n.addr} for n in self.nodes],
                "gbit": self.gbit, "latency_us": self.latency_us, "slots": self.slots, "cpus": list(self.cpus),
                "local": list(self.local), "notes": self.notes, "state": str(self.state),
                "hostfile": str(self.hostfile), "topology": str(self.topology_file)}

    # ------------------------------------------------------------------ node-local directories
    def local_dir(self, which: int | str, path: str) -> Path:
        """Where, seen from this machine, a node keeps what it writes under its node-local ``path``."""
        for d in self.local:
            rel = os.path.relpath(path, d)
            if rel == "." or not rel.startswith(".."):
                return self.state / "local" / self.node(which).name / d.strip("/") / ("" if rel == "." else rel)
        raise RankmapError(f"{path} is not under a node-local directory ({', '.join(self.local) or 'none'})")

    def gather(self, path: str, dest: str | Path) -> list[Path]:
        """Copy every node's ``path`` (a node-local directory) into ``dest``: the files of all nodes
        side by side, as a user collects run directories after a job. Returns the files copied."""
        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        out = []
        for n in self.nodes:
            src = self.local_dir(n.index, path)
            if not src.is_dir():
                continue
            for f in sorted(src.iterdir()):
                if f.is_file():
                    target = dest / f.name
                    if target.exists() and f.name == "job.json":
                        continue     # the same job's description on every node: keep the first
                    shutil.copy2(f, target)
                    out.append(target)
        return out

    # ------------------------------------------------------------------ what the links really do
    def measure(self, a: int = 0, b: int = 1, nbytes: int = 32 << 20, pings: int = 200) -> dict:
        """TCP throughput (GB/s) from node ``a`` to node ``b`` and the one-way latency (us, half the
        median round trip of a 1-byte ping-pong), measured between the two namespaces."""
        port = 47000 + os.getpid() % 1000
        server = self.popen(b, [sys.executable, "-c", _MEASURE_SERVER, str(port), str(nbytes), str(pings)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            time.sleep(0.3)
            c = self.run(a, [sys.executable, "-c", _MEASURE_CLIENT, self.node(b).addr, str(port), str(nbytes),
                             str(pings)], timeout=120)
            if c.returncode != 0:
                raise RankmapError(f"emulated nodes: measuring {self.node(a).name} -> {self.node(b).name} failed: "
                                   f"{c.stderr.strip().splitlines()[-1:] or c.returncode}")
            out = json.loads(c.stdout)
        finally:
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
        return out


_MEASURE_SERVER = r"""
import socket, sys
port, nbytes, pings = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("", port)); s.listen(1)
c, _ = s.accept(); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
got = 0
while got < nbytes:
    b = c.recv(1 << 20)
    if not b: break
    got += len(b)
c.sendall(b"k")
for _ in range(pings):
    c.sendall(c.recv(1))
c.close()
"""

_MEASURE_CLIENT = r"""
import json, socket, statistics, sys, time
host, port, nbytes, pings = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
for _ in range(50):
    try:
        c = socket.create_connection((host, port), timeout=10); break
    except OSError:
        time.sleep(0.1)
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
buf = b"x" * (1 << 20)
t0 = time.perf_counter(); sent = 0
while sent < nbytes:
    c.sendall(buf); sent += len(buf)
c.recv(1)
t = time.perf_counter() - t0
rtt = []
for _ in range(pings):
    t1 = time.perf_counter(); c.sendall(b"p"); c.recv(1); rtt.append(time.perf_counter() - t1)
print(json.dumps({"gbytes_per_s": sent / t / 1e9, "latency_us": statistics.median(rtt) / 2 * 1e6}))
"""


def emulated_topology(slots: int, gbit: float, latency_us: float | None = None, cpus: list[str] | None = None,
                      notes: Sequence[str] = (), name: str | None = None):
    """An emulated node as a rankmap topology: its rank slots as the devices ranks are placed on
    (kind ``gpu``, each with the CPUs its rank is bound to: ``cpus``, default CPU ``s`` modulo this
    machine's), one CPU, and the NIC ``rmnet0`` at ``gbit`` (GB/s in the topology) with its one-way
    ``latency_us`` where known. In-node bytes go through the host's memory, taken at 20 GB/s, far
    above any link rate the nodes are shaped to. Needs no root: it only describes."""
    from rankmap.topology.model import Device, DeviceKind as K, Link, LinkKind as L, Topology

    if cpus is None:
        ncpu = len(os.sched_getaffinity(0))
        cpus = [str(s % ncpu) for s in range(slots)]
    every = sorted({int(c) for cs in cpus for c in _cpu_numbers(cs)})
    devs = [Device("cpu0", K.CPU, 0, attrs={"cpus": ",".join(map(str, every)), "numa_node": 0}),
            Device("hb0", K.HOST_BRIDGE, 0), Device("sw0", K.PCIE_SWITCH, 0)]
    links = [Link("cpu0", "hb0", L.PCIE, 20.0), Link("hb0", "sw0", L.PCIE, 20.0)]
    for s in range(slots):
        devs.append(Device(f"gpu{s}", K.GPU, s, name=f"slot{s}",
                           attrs={"cpus": cpus[s], "numa_node": 0, "emulated": "rank slot"}))
        links.append(Link("sw0", f"gpu{s}", L.PCIE, 20.0))
    nic: dict = {"bandwidth": gbit / 8.0}
    if latency_us:
        nic["latency_us"] = round(float(latency_us), 3)
    devs.append(Device("nic0", K.NIC, 0, name=IFACE, attrs=nic))
    links.append(Link("sw0", "nic0", L.PCIE, 20.0))
    return Topology(name or f"emulated-{slots}slot-{gbit:g}gbit", devs, links, source="rankmap.nodes.cluster",
                    notes=[f"an emulated node of {slots} CPU-only rank slots (the 'GPUs'), its link shaped to "
                           f"{gbit:g} Gbit/s"] + list(notes))


def _cpu_numbers(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        a, _, b = part.partition("-")
        out += list(range(int(a), int(b or a) + 1))
    return out


def _tbf(gbit: float) -> list[str]:
    """A token bucket at ``gbit``: the bucket at least two 64 KiB GSO segments, else about 100 us
    of the rate; packets wait at most 50 ms."""
    burst = max(65536 * 2, int(gbit * 1e9 / 8 * 1e-4))
    return ["tbf", "rate", f"{gbit * 1000:g}mbit", "burst", str(burst), "latency", "50ms"]


def _base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if not n:
            return out


def _ns_pids(ns: str) -> list[int]:
    p = _sh(["ip", "netns", "pids", ns], check=False)
    return [int(x) for x in p.stdout.split() if x.isdigit()]


def _remove(tag: str, state: Path) -> None:
    """Remove the emulated nodes of ``tag``: processes (munged too), namespaces, links, bridge, files."""
    try:
        os.kill(int((state / "slurm" / "munged.pid").read_text().split()[0]), signal.SIGTERM)
    except (OSError, ValueError, IndexError):
        pass
    nss = [l.split()[0] for l in _sh(["ip", "netns", "list"], check=False).stdout.splitlines()
           if l.split() and l.split()[0].startswith(f"{tag}-")]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = [p for ns in nss for p in _ns_pids(ns)]
        for p in pids:
            try:
                os.kill(p, sig)
            except OSError:
                pass
        deadline = time.time() + 3
        while pids and time.time() < deadline and any(_ns_pids(ns) for ns in nss):
            time.sleep(0.05)
    for ns in nss:
        _sh(["ip", "netns", "del", ns], check=False)
        shutil.rmtree(Path("/etc/netns") / ns, ignore_errors=True)
    links = _sh(["ip", "-o", "link", "show"], check=False).stdout
    for name in re.findall(rf"^\d+: ({re.escape(tag)}[bvp]\d*)[@:]", links, re.M):
        _sh(["ip", "link", "del", name], check=False)
    for uts in sorted((state / "uts").glob("*")) if (state / "uts").is_dir() else []:
        _sh(["umount", str(uts)], check=False)
    if (state / "shm").is_mount():
        _sh(["umount", "-l", str(state / "shm")], check=False)
    shutil.rmtree(state, ignore_errors=True)


def sweep() -> list[str]:
    """Remove the emulated nodes whose owning process is gone (killed before its ``down``); returns
    their tags."""
    from rankmap.store import process_alive

    gone = []
    if not STATE_ROOT.is_dir():
        return gone
    for d in sorted(STATE_ROOT.iterdir()):
        try:
            owner = (d / "owner").read_text().strip()
        except OSError:
            owner = ""
        if process_alive(owner) is not False and owner:
            continue
        _remove(d.name, d)
        gone.append(d.name)
    return gone


def load(tag: str) -> Cluster:
    """The cluster of ``tag`` brought up by another process (``rankmap.nodes.cluster up``)."""
    f = STATE_ROOT / tag / "cluster.json"
    try:
        d = json.loads(f.read_text())
    except (OSError, ValueError):
        raise RankmapError(f"no emulated nodes {tag!r} are up (no {f})") from None
    c = Cluster(len(d["nodes"]), gbit=d["gbit"], latency_us=d["latency_us"], slots=d["slots"],
                local=tuple(d["local"]), cpus=tuple(d["cpus"]), tag=tag)
    c.notes = list(d.get("notes", []))
    return c


def main(argv: list[str] | None = None) -> int:
    """``python -m rankmap.nodes.cluster up|down|list|exec|measure``: emulated nodes by hand."""
    import argparse

    ap = argparse.ArgumentParser(prog="nodes", description="emulated nodes on this machine (network namespaces "
                                 "joined by a shaped bridge); needs root")
    sub = ap.add_subparsers(dest="verb", required=True)
    up = sub.add_parser("up", help="make nodes and print their description (JSON); they stay until `down`")
    up.add_argument("--count", type=int, default=2)
    up.add_argument("--gbit", type=float, default=1.0, help="link rate per node, Gbit/s (default 1)")
    up.add_argument("--latency-us", type=float, default=None, help="one-way delay per node link (needs netem)")
    up.add_argument("--slots", type=int, default=2, help="ranks per node in the hostfile (default 2)")
    up.add_argument("--local", action="append", default=[], metavar="DIR", help="a node-local directory")
    up.add_argument("--tag", default="rmnodes", help="name of this set of nodes (default rmnodes)")
    down = sub.add_parser("down", help="remove nodes")
    down.add_argument("--tag", default="rmnodes")
    sub.add_parser("list", help="the sets of nodes that are up")
    ex = sub.add_parser("exec", help="run a command on a node: exec NODE -- CMD...")
    ex.add_argument("--tag", default="rmnodes")
    ex.add_argument("--mpi", action="store_true", help="with the MPI launchers' variables (mpi_env)")
    ex.add_argument("node")
    ex.add_argument("cmd", nargs=argparse.REMAINDER)
    me = sub.add_parser("measure", help="TCP throughput and latency between node0 and node1")
    me.add_argument("--tag", default="rmnodes")
    a = ap.parse_args(argv)
    try:
        if a.verb == "up":
            c = Cluster(a.count, gbit=a.gbit, latency_us=a.latency_us, slots=a.slots, local=tuple(a.local),
                        tag=a.tag)
            c.up()
            (c.state / "owner").write_text("by hand")   # no process owns it: it stays until `down`
            print(json.dumps(c.describe(), indent=1))
        elif a.verb == "down":
            _remove(a.tag, STATE_ROOT / a.tag)
        elif a.verb == "list":
            for d in sorted(STATE_ROOT.iterdir()) if STATE_ROOT.is_dir() else []:
                print(d.name)
        elif a.verb == "exec":
            c = load(a.tag)
            cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
            os.execvp("env", c.argv(a.node, cmd, c.mpi_env() if a.mpi else None))
        elif a.verb == "measure":
            print(json.dumps(load(a.tag).measure()))
    except RankmapError as e:
        print(f"nodes: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
