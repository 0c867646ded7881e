"""The one schema of rankmap's store, written once in SQLAlchemy Core for SQLite and PostgreSQL.

Why Core and not an ORM: every query here is a bulk insert or an aggregate over a few
tables, and the same ``Table`` objects must create the schema on both back ends. Bytes,
messages and times are int64 (``BigInteger``), as everywhere in rankmap; structured
side data (histograms, mapping, free-form metadata) is ``JSON``, which both back ends store.

Rows that come from a rank's record file carry ``(job, rank, source)``. Ingest is append-only:
each write adds the counters a file gained since the last one into rows keyed by what they count
(``ON CONFLICT ... DO UPDATE SET bytes = bytes + excluded.bytes``), and ``ingest_files`` keeps, in
the same transaction, how far each file has been read. So a write costs what changed, never what
the job has accumulated, and an interrupted ingest resumes exactly where it stopped.

The timeline is kept at a bounded number of rows however long a job runs: the newest buckets at
their own width, older ones merged into slots of 2, 4, 8 ... buckets (``width``), see
:func:`rankmap.store.batch.timeline_slot`.

Version 2 (this one) added job states, ``ingest_files``, the unique keys of the counters and the
timeline's ``width`` (the timeline is per sending rank; version 1 kept it per rank pair).
"""

from __future__ import annotations

from sqlalchemy import (JSON, BigInteger, Boolean, Column, DateTime, Float, ForeignKey, Index,
                        Integer, MetaData, String, Table, Text)

SCHEMA_VERSION = 4          # 2: traffic.pair_source; 3: job states, unique counter keys, ingest_files; 4: failed
#: job states: the profiler is alive / it saw the job end with exit status 0 (or none known) and
#: stored everything / the same, but the job exited non-zero (a launcher that started no rank, a
#: crash: what it recorded is stored) / the profiler is gone and the store may lack part of the job
#: (``rankmap ingest`` of the run directory completes it)
JOB_STATES = ("running", "finished", "failed", "incomplete")


def ended_state(exit_status: int | None) -> str:
    """The state of a job that ended with everything stored: ``failed`` for a non-zero exit status."""
    return "failed" if exit_status not in (None, 0) else "finished"


def state_words(state: str, exit_status: int | None) -> str:
    """A job's state as the verbs print it: "failed (exit 1)", else the state."""
    return f"failed (exit {exit_status})" if state == "failed" else state

#: the largest row id (``Integer`` primary keys are 32-bit on PostgreSQL, which refuses to compare
#: them with a larger bound value -- "integer out of range" -- where such an id simply names no row)
MAX_ROW_ID = 2**31 - 1

metadata = MetaData()

meta_info = Table(
    "rankmap_schema", metadata,
    Column("version", Integer, primary_key=True),
)

jobs = Table(
    "jobs", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("created", DateTime(timezone=True), nullable=False),
    Column("ended", DateTime(timezone=True)),
    Column("command", Text, nullable=False),          # shell-quoted, as the user typed it
    Column("command_key", Text, nullable=False),      # normalised, for caching profiles and mappings
    Column("launcher", String(32), nullable=False),
    Column("world_size", Integer),
    Column("hosts", JSON),
    Column("exit_status", Integer),                   # NULL while running
    Column("elapsed_ns", BigInteger),
    Column("run_dir", Text),
    Column("meta", JSON),
    Column("state", String(16), nullable=False, server_default="running"),   # JOB_STATES
    Column("run_uid", String(40)),                    # the run directory's own id (its job.json)
    Column("profiler", Text),                         # "host pid start" of the rankmap that streams it:
    Column("heartbeat", DateTime(timezone=True)),     # its last write; a job whose profiler is gone
                                                      # is no longer running
)
Index("ix_jobs_key", jobs.c.command_key, jobs.c.world_size)
Index("ix_jobs_run_uid", jobs.c.run_uid)

ranks = Table(
    "ranks", metadata,
    Column("job", Integer, ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True),
    Column("world_rank", Integer, primary_key=True),
    Column("source", String(8), primary_key=True),   # 'mpi' | 'nccl'
    Column("host", Text),
    Column("pid", Integer),
    Column("start_ns", BigInteger),
    Column("elapsed_ns", BigInteger),
    Column("comm_ns", BigInteger),                    # time inside MPI (or NCCL) calls
    Column("finalized", Boolean),                     # the rank wrote its final flush
    Column("problems", JSON),
)

traffic = Table(
    "traffic", metadata,
    Column("job", Integer, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("source", String(8), nullable=False),      # which record file the row came from
    Column("src", Integer, nullable=False),
    Column("dst", Integer, nullable=False),
    Column("class", String(16), nullable=False),
    Column("operation", String(64), nullable=False),
    Column("mem", String(16), nullable=False),
    Column("bytes", BigInteger, nullable=False),
    Column("messages", BigInteger, nullable=False),
    Column("reporter", Integer, nullable=False),      # the rank whose file holds the row
    # where the pair attribution comes from: 'call' (counted at the call: exact), 'library' (the
    # library's own accounting), 'mirror' (its algorithm choice followed), 'model'; NULL: stored
    # before rows carried it (docs/collective-models.md)
    Column("pair_source", String(8)),
)
Index("ux_traffic_key", traffic.c.job, traffic.c.source, traffic.c.reporter, traffic.c.src, traffic.c.dst,
      traffic.c["class"], traffic.c.operation, traffic.c.mem, traffic.c.pair_source, unique=True)

op_stats = Table(
    "op_stats", metadata,
    Column("job", Integer, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("rank", Integer, nullable=False),
    Column("source", String(8), nullable=False),
    Column("operation", String(64), nullable=False),
    Column("calls", BigInteger, nullable=False),
    Column("ns", BigInteger, nullable=False),
    Column("payload", BigInteger),                    # logical payload bytes of the calls
    Column("histogram", JSON),                        # message counts per power-of-two size bucket
)
Index("ux_op_stats_key", op_stats.c.job, op_stats.c.rank, op_stats.c.source, op_stats.c.operation, unique=True)

timeline = Table(
    "timeline", metadata,
    Column("job", Integer, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("source", String(8), nullable=False),
    Column("src", Integer, nullable=False),           # the sending rank (all its peers together)
    Column("class", String(16), nullable=False),
    Column("width", Integer, nullable=False),         # buckets in this slot: 1, 2, 4, ... (older: wider)
    Column("bucket", Integer, nullable=False),        # first bucket of the slot (a multiple of width)
    Column("bytes", BigInteger, nullable=False),
)
Index("ux_timeline_key", timeline.c.job, timeline.c.width, timeline.c.bucket, timeline.c.source, timeline.c.src,
      timeline.c["class"], unique=True)

ingest_files = Table(
    "ingest_files", metadata,
    Column("job", Integer, ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True),
    Column("name", Text, primary_key=True),           # the record file's name in the run directory
    Column("done_bytes", BigInteger, nullable=False), # bytes of it stored so far
    Column("state", JSON, nullable=False),            # the reader's state there (rankmap.formats.record)
)

pvars = Table(
    "pvars", metadata,                                # MPI_T performance variables, per rank over time
    Column("job", Integer, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("source", String(8), nullable=False),
    Column("rank", Integer, nullable=False),          # the world rank that read it
    Column("t_ns", BigInteger, nullable=False),       # ns since that rank's start (ranks.start_ns)
    Column("name", String(255), nullable=False),      # the variable's MPI_T name
    Column("class", String(16), nullable=False),      # MPI_T class: counter, level, timer, ...
    Column("value", Float),                           # the value; several elements: their sum
    Column("values", JSON),                           # every element (a list, one or more)
)
Index("ix_pvars_job", pvars.c.job, pvars.c["name"], pvars.c.rank)

link_samples = Table(
    "link_samples", metadata,
    Column("job", Integer, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("t_ns", BigInteger, nullable=False),
    Column("device", Integer, nullable=False),
    Column("link", String(32), nullable=False),       # e.g. 'nvlink' (all links), 'nvlink3', 'pcie'
    Column("tx_bytes", BigInteger),
    Column("rx_bytes", BigInteger),
)
Index("ix_link_samples_job", link_samples.c.job, link_samples.c.t_ns)

# CUDA activity (source 'cuda' record files): copies and kernels per rank, summed over the run, and
# their timeline; the state of the capture and the names of the devices per rank.
cuda_copies = Table(
    "cuda_copies", metadata,
    Column("job", Integer, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("rank", Integer, nullable=False),
    Column("kind", String(16), nullable=False),       # H2D, D2H, D2D, P2P, H2H, memset, other
    Column("src_mem", String(16), nullable=False),    # CUPTI memory kind: pageable, pinned, device, ...
    Column("dst_mem", String(16), nullable=False),
    Column("src_dev", Integer, nullable=False),       # CUDA ordinal in the rank's process, -1: host
    Column("dst_dev", Integer, nullable=False),
    Column("count", BigInteger, nullable=False),
    Column("bytes", BigInteger, nullable=False),
    Column("ns", BigInteger, nullable=False),         # summed durations
)
Index("ix_cuda_copies_job", cuda_copies.c.job, cuda_copies.c.rank)

cuda_kernels = Table(
    "cuda_kernels", metadata,
    Column("job", Integer, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("rank", Integer, nullable=False),
    Column("device", Integer, nullable=False),
    Column("name", Text, nullable=False),
    Column("count", BigInteger, nullable=False),
    Column("ns", BigInteger, nullable=False),
)
Index("ix_cuda_kernels_job", cuda_kernels.c.job, cuda_kernels.c.rank)

cuda_timeline = Table(
    "cuda_timeline", metadata,
    Column("job", Integer, ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("rank", Integer, nullable=False),
    Column("bucket", Integer, nullable=False),
    Column("what", String(16), nullable=False),       # a copy kind, or 'kernel'
    Column("count", BigInteger, nullable=False),
    Column("bytes", BigInteger, nullable=False),
    Column("ns", BigInteger, nullable=False),
)
Index("ix_cuda_timeline_job", cuda_timeline.c.job, cuda_timeline.c.rank)

cuda_ranks = Table(
    "cuda_ranks", metadata,
    Column("job", Integer, ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True),
    Column("rank", Integer, primary_key=True),
    Column("activity", Text),                         # 'on: ...', 'off: why', 'stopped: why'
    Column("devices", JSON),                          # ordinal -> 'PCI bus id and name'
    Column("records", Text),                          # what the library counted (records, dropped)
)

mappings = Table(
    "mappings", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job", Integer, ForeignKey("jobs.id", ondelete="SET NULL")),
    Column("created", DateTime(timezone=True), nullable=False),
    Column("command_key", Text),
    Column("world_size", Integer),
    Column("topology", Text),
    Column("mapping", JSON, nullable=False),
    Column("max_congestion_before", Float),
    Column("avg_congestion_before", Float),
    Column("max_congestion_after", Float),
    Column("avg_congestion_after", Float),
    Column("optimal", Boolean),
    Column("meta", JSON),
)
Index("ix_mappings_key", mappings.c.command_key, mappings.c.world_size)

# Benchmark runs (`rankmap bench p2p|mpi|nccl`) and their rows (rankmap.linkbench.rows declares the row).
bench_runs = Table(
    "bench_runs", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("created", DateTime(timezone=True), nullable=False),
    Column("kind", String(16), nullable=False),       # 'p2p' | 'mpi' | 'nccl'
    Column("host", Text),
    Column("command", Text),                          # the program (and launcher) that measured
    Column("machine", JSON),                          # GPUs, versions, CUDA-awareness, rank placement
    Column("ran", JSON),                              # what was measured, said plainly
    Column("not_run", JSON),                          # what could not be, with the reason
    Column("meta", JSON),
)
Index("ix_bench_runs_kind", bench_runs.c.kind, bench_runs.c.host)

bench_results = Table(
    "bench_results", metadata,
    Column("run", Integer, ForeignKey("bench_runs.id", ondelete="CASCADE"), nullable=False),
    Column("benchmark", String(32), nullable=False),
    Column("library", String(16)),                    # 'cuda' | 'mpi' | 'nccl'
    Column("buffer", String(16)),
    Column("src", Integer),                           # GPU index, -1 = host memory (p2p rows)
    Column("dst", Integer),
    Column("size", BigInteger, nullable=False),       # bytes
    Column("latency_us", Float),
    Column("bandwidth_gbps", Float),                  # GB/s (1e9 bytes), per direction
    Column("total_gbps", Float),                      # both directions added (bidirectional rows)
    Column("algbw_gbps", Float),
    Column("busbw_gbps", Float),
    Column("extra", JSON),
)
Index("ix_bench_results_run", bench_results.c.run)
