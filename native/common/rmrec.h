/*
 * rmrec.h -- rankmap record writer (one per-rank record file, see docs/record-format.md)
 *
 * Shared by the MPI shim (native/mpi), the NCCL profiler plugin (native/nccl) and the CUDA activity
 * library (native/cuda).
 * No MPI, CUDA or NCCL dependency: plain C11 + pthreads.
 *
 * API for a capture source
 * ------------------------
 *   rmrec_t *c = rmrec_open(dir, "nccl", world_rank, world_size);
 *       Creates <dir>/rank-<world_rank>.<source>.rmrec (dir is created if missing) and starts
 *       the flush thread.  dir == NULL or "" -> returns NULL silently (capture off).  Any
 *       failure prints ONE line "rankmap: capture disabled: <why>" and returns NULL.
 *       Every other function accepts c == NULL and then does nothing, so callers need no checks.
 *   int op = rmrec_op(c, "ncclAllReduce");
 *       Registers an operation name, returns its id (0..RMREC_MAX_OPS-1, idempotent,
 *       thread-safe, takes a lock: call it once at setup and keep the id).
 *   rmrec_traffic(c, peer, RMREC_NCCL, op, RMREC_MEM_DEVICE, RMREC_SEND, bytes, msgs);
 *       Hot path, lock-free (atomic adds into a preallocated hash table), any thread.
 *       peer is a WORLD rank.  Sends also feed the timeline (bytes per peer per bucket).
 *       rmrec_traffic_at(..., ticks) takes an rmrec_ticks() value the caller already has;
 *       rmrec_traffic_from(..., ticks, origin) also says where the peer attribution came from.
 *   uint64_t t0 = rmrec_ticks();  ...  rmrec_call(c, op, payload_bytes, rmrec_ticks() - t0);
 *       One call of an operation: time += ticks, payload += bytes, and the power-of-two size
 *       histogram of op gets payload_bytes (its calls are the histogram's sum, so a call costs
 *       one counter less).  Hot path, lock-free.
 *   rmrec_single_writer(c, 1);   hot-path calls never overlap: plain adds, no locked atomics
 *   rmrec_timeline_at(c, peer, klass, bytes, ticks);  timeline only (no traffic row)
 *   rmrec_pre_flush(c, fn, arg);  fn(arg) on the flush thread before each periodic flush
 *   rmrec_epoch                  changes at every timeline bucket boundary (see below)
 *   rmrec_ticks_to_ns(dt), rmrec_ticks_to_mono_ns(t), rmrec_ns_to_ticks(ns)
 *       the shared, calibrated tick clock (below)
 *   rmrec_comm(c, id, "name", size, world_ranks);   communicator membership (locked, rare)
 *   rmrec_meta(c, "key", "value");                  free-form key/value (locked, rare)
 *   rmrec_flush(c);                                 append a flush now (the thread does it every
 *                                                   RANKMAP_FLUSH_MS, default 1000)
 *   rmrec_close(c);                                 final flush with the finalize marker; c stays
 *                                                   valid (disabled) so racing threads are safe.
 *
 * CUDA activity (source "cuda"; rows are summed under a lock: they come from the activity
 * buffer thread, not from the application's hot path):
 *   rmrec_copy(c, start_mono_ns, RMREC_COPY_H2D, src_mem, dst_mem, src_dev, dst_dev, bytes, n, ns);
 *   int k = rmrec_name(c, "kernel name");  rmrec_kernel(c, start_mono_ns, dev, k, ns);
 *       start_mono_ns: CLOCK_MONOTONIC ns of the activity's start (0: unknown, no timeline row).
 *
 * Environment: RANKMAP_BUCKET_MS (timeline bucket, default 100), RANKMAP_FLUSH_MS (default 1000),
 * RANKMAP_TABLE_SLOTS (traffic hash-table slots, default 262144, power of two).
 * Counters are flushed as deltas; the reader (rankmap.formats.record) sums them.
 * fork(): the child's copy is disabled (it never writes the parent's file).
 */
#ifndef RANKMAP_RMREC_H
#define RANKMAP_RMREC_H

#include <stdint.h>

#include "rmrec_layout.h"
#if defined(__x86_64__) && !defined(RMREC_NO_TSC)
#include <x86intrin.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define RMREC_MAX_OPS   256

/* Codes of the record format, from the one declaration in rmrec_layout.h:
 * classes RMREC_P2P, RMREC_COLL, RMREC_RMA, RMREC_NCCL (RMREC_NCLASS of them), memory kinds
 * RMREC_MEM_*, directions RMREC_SEND / RMREC_RECV, sources RMREC_SRC_*, CUDA copy kinds
 * RMREC_COPY_*. */
#define RMREC_ENUM_PLAIN_(name, value, text) RMREC_##name = value,
#define RMREC_ENUM_MEM_(name, value, text) RMREC_MEM_##name = value,
#define RMREC_ENUM_SRC_(name, value, text) RMREC_SRC_##name = value,
#define RMREC_ENUM_COPY_(name, value, text) RMREC_COPY_##name = value,
#define RMREC_COUNT_(name, value, text) + 1
enum { RMREC_CLASSES(RMREC_ENUM_PLAIN_) RMREC_NCLASS = 0 RMREC_CLASSES(RMREC_COUNT_) };
enum { RMREC_MEMS(RMREC_ENUM_MEM_) };
enum { RMREC_DIRECTIONS(RMREC_ENUM_PLAIN_) };
enum { RMREC_SOURCES(RMREC_ENUM_SRC_) };
enum { RMREC_COPY_KINDS(RMREC_ENUM_COPY_) };
#define RMREC_MAX_NAMES 4096   /* kernel names per file; later ones are counted as "(other kernels)" */
/* where a traffic row's peer attribution comes from: RMREC_ORIGIN_CALL / _LIBRARY / _MIRROR / _MODEL */
#define RMREC_ENUM_ORIGIN_(name, value, text) RMREC_ORIGIN_##name = value,
enum { RMREC_ORIGINS(RMREC_ENUM_ORIGIN_) };
/* block types a source may append from its flush hook (rmrec_on_flush / rmrec_put) */
#define RMREC_ENUM_BTYPE_(name, value, text) RMREC_BT_##name = value,
enum { RMREC_BLOCKS(RMREC_ENUM_BTYPE_) };
/* The packed row structs of rmrec_layout.h, for a source that writes its own block types:
 *   typedef struct { RMREC_ROW_COLLFACT_CALLS(RMREC_FIELD_, RMREC_ARRAY_) } my_row_t;
 * inside #pragma pack(push, 1). */
typedef uint8_t rmrec_u8;
typedef uint16_t rmrec_u16;
typedef uint32_t rmrec_u32;
typedef uint64_t rmrec_u64;
typedef int32_t rmrec_i32;
typedef int64_t rmrec_i64;
#define RMREC_FIELD_(type, name) rmrec_##type name;
#define RMREC_ARRAY_(type, name, count) rmrec_##type name[count];

typedef struct rmrec rmrec_t;

/* Everything below is internal to the library that compiles rmrec.c in (the shim, the plugin):
 * hidden, so calls need no PLT hop and two rankmap libraries in one process never bind to each
 * other's copy. */
#pragma GCC visibility push(hidden)

rmrec_t *rmrec_open(const char *dir, const char *source, int world_rank, int world_size);
/* Same, but an existing file is never replaced: rank-<r>.<source>.rmrec is created exclusively,
 * else rank-<r>-<pid>-<k>.<source>.rmrec (one process with several record files whose ranks are
 * provisional, the NCCL plugin's case). */
rmrec_t *rmrec_open_unique(const char *dir, const char *source, int world_rank, int world_size);
int  rmrec_op(rmrec_t *c, const char *name);
void rmrec_traffic(rmrec_t *c, int peer, int klass, int op, int mem, int dir,
                   uint64_t bytes, uint64_t msgs);
/* Same, with the caller's rmrec_ticks() reading for the timeline (saves a clock read). */
void rmrec_traffic_at(rmrec_t *c, int peer, int klass, int op, int mem, int dir,
                      uint64_t bytes, uint64_t msgs, uint64_t ticks);
/* Same, with an explicit origin (RMREC_ORIGIN_*); rmrec_traffic* record RMREC_ORIGIN_CALL. */
void rmrec_traffic_from(rmrec_t *c, int peer, int klass, int op, int mem, int dir,
                        uint64_t bytes, uint64_t msgs, uint64_t ticks, int origin);
void rmrec_call(rmrec_t *c, int op, uint64_t payload_bytes, uint64_t ticks);
/* Timeline bucket of an rmrec_ticks() reading (the index TIMELINE rows use). */
int64_t rmrec_bucket(rmrec_t *c, uint64_t ticks);
/* Nanoseconds since rmrec_open (the FLUSH rows' elapsed clock). */
int64_t rmrec_elapsed_ns(rmrec_t *c);
/* A flush hook: called inside every flush (periodic ones from the flush thread) and the last one
 * (final = 1, from the thread calling rmrec_close), after the writer's own blocks and before the
 * FLUSH marker.  Inside it, rmrec_put appends one entry to a block of the given type (blocks split
 * at about 1 MiB), so a source writes its own block types with the same framing and checksums.
 * One hook per writer. */
void rmrec_on_flush(rmrec_t *c, void (*fn)(rmrec_t *c, void *arg, int final), void *arg);
void rmrec_put(rmrec_t *c, int type, const void *row, uint32_t len);
/* Only the timeline: bytes into the bucket of ticks for (peer, klass), no traffic row. */
void rmrec_timeline_at(rmrec_t *c, int peer, int klass, uint64_t bytes, uint64_t ticks);
/* fn(arg) runs on the flush thread before each periodic flush (outside the writer's locks), so a
 * source can put what it keeps itself (e.g. tables as META) into that flush. */
void rmrec_pre_flush(rmrec_t *c, void (*fn)(void *), void *arg);
void rmrec_comm(rmrec_t *c, uint64_t id, const char *name, int size, const int *world_ranks);
void rmrec_meta(rmrec_t *c, const char *key, const char *value);
/* CUDA activity (above).  mem kinds are CUPTI's memory kinds (0 unknown, 1 pageable, 2 pinned,
 * 3 device, 4 array, 5 managed, 6 device_static, 7 managed_static); a device is -1 for host. */
void rmrec_copy(rmrec_t *c, uint64_t start_mono_ns, int kind, int src_mem, int dst_mem, int src_dev, int dst_dev,
                uint64_t bytes, uint64_t count, uint64_t ns);
int  rmrec_name(rmrec_t *c, const char *name);
void rmrec_kernel(rmrec_t *c, uint64_t start_mono_ns, int dev, int name_id, uint64_t ns);
void rmrec_flush(rmrec_t *c);
void rmrec_close(rmrec_t *c);
/* Disable capture with one stderr line (first call only); safe from any thread. */
void rmrec_fail(rmrec_t *c, const char *why);
int  rmrec_enabled(const rmrec_t *c);
/* The caller promises that hot-path calls (rmrec_traffic*, rmrec_call) on c never overlap in
 * time (one thread, or threads serialised by the application, e.g. MPI below
 * MPI_THREAD_MULTIPLE): counters are then bumped with plain loads and stores instead of locked
 * read-modify-writes.  Call it before the first hot-path call.  Counts stay exact either way. */
void rmrec_single_writer(rmrec_t *c, int on);
/* ---- cached hot path ------------------------------------------------------------------------
 * The counters behind rmrec_traffic_at and rmrec_call, for a hook that keeps pointers to them
 * (the MPI shim: one table lookup per distinct row and thread instead of one per call).  Their
 * addresses are fixed while the writer lives (it is never freed).  Add to them with rmrec_add:
 * plain when the caller is their only writer -- everything below rmrec_single_writer, or the
 * counters of a shard the calling thread owns -- locked otherwise.
 * Shards: rmrec_shard() gives the calling thread counters of its own (1..31; 0 = the shared ones,
 * also when none is left); rows and operation counters of every shard are summed at flush. */
typedef struct { _Atomic uint64_t key, bytes, msgs; } rmrec_slot_t;
/* an operation's counters; its calls are the sum of hist (each call adds one to one bin) */
typedef struct { _Atomic uint64_t ticks, bytes, hist[RMREC_HIST_BINS]; } rmrec_opstat_t;
int rmrec_shard(rmrec_t *c);
rmrec_slot_t *rmrec_slot(rmrec_t *c, int shard, int origin, int peer, int klass, int op, int mem,
                         int dir);  /* NULL: off */
rmrec_opstat_t *rmrec_opstats(rmrec_t *c, int shard);       /* array indexed by op; NULL: no shard */
_Atomic uint64_t *rmrec_tl_cell(rmrec_t *c, int peer, int klass, uint64_t ticks);  /* NULL: none */
/* A plain add is a relaxed load and store (a reader sees the old or the new value, never a torn
 * one); on x86-64 one add to memory does exactly that, where the compiler would emit three
 * instructions and take a register for the sum. */
static inline __attribute__((always_inline)) void rmrec_add(_Atomic uint64_t *p, uint64_t v, int plain) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (plain) { __asm__("addq %1, %0" : "+m"(*(uint64_t *)p) : "er"(v)); return; }
#else
  if (plain) { __atomic_store_n((uint64_t *)p, __atomic_load_n((uint64_t *)p, __ATOMIC_RELAXED) + v, __ATOMIC_RELAXED); return; }
#endif
  __atomic_fetch_add((uint64_t *)p, v, __ATOMIC_RELAXED);
}
static inline __attribute__((always_inline)) int rmrec_hist_bin(uint64_t n) {      /* 0: 0 bytes; k: 2^(k-1) <= n < 2^k */
  return n ? 64 - __builtin_clzll(n) - (n >> 63) : 0;   /* 2^63 and up share the last bin */
}

/* Monotonic clock in nanoseconds (CLOCK_MONOTONIC). */
uint64_t rmrec_now_ns(void);
/* Timeline epoch: advanced by the flush thread of an open writer at every timeline bucket
 * boundary.  A hook may keep using an earlier rmrec_ticks() reading as the timeline time of new
 * rows while the epoch is the one it saw at that reading: the reading is in the current bucket
 * (up to the flush thread's wake-up delay after the boundary), and the hook saves a clock read. */
extern volatile unsigned rmrec_epoch;

#ifdef RMREC_VIRTUAL_CLOCK
/* Benchmarks: rmrec_now_ns() (and so the ticks, with RMREC_NO_TSC) is whatever was set last. */
void rmrec_virtual_clock_set(uint64_t ns);
#endif

/* ---- ticks: the one cheap clock of every rankmap hook ----------------------------------------
 * rmrec_ticks() is the TSC on x86-64 (rdtsc, ~10 ns, no system call) and CLOCK_MONOTONIC ns
 * elsewhere or when built with -DRMREC_NO_TSC.  The conversion is process-wide: a reference pair
 * (ticks, CLOCK_MONOTONIC ns) is taken at the first use, and the ratio is re-estimated over the
 * whole time since then by rmrec_ticks_calibrate() (rmrec_open waits 1 ms for a first estimate;
 * every flush refines it), so its error shrinks as the run goes on.  Conversions are a multiply
 * and a shift; they may be called from any thread. */
#if defined(__x86_64__) && !defined(RMREC_NO_TSC)
#define RMREC_TICKS_ARE_NS 0
static inline uint64_t rmrec_ticks(void) { return __rdtsc(); }
#else
#define RMREC_TICKS_ARE_NS 1
static inline uint64_t rmrec_ticks(void) { return rmrec_now_ns(); }
#endif
/* A duration in ticks -> ns. */
uint64_t rmrec_ticks_to_ns(uint64_t dticks);
/* A duration in ns -> ticks (for deadlines on the hot path). */
uint64_t rmrec_ns_to_ticks(uint64_t ns);
/* A point in time, an rmrec_ticks() value -> CLOCK_MONOTONIC ns. */
uint64_t rmrec_ticks_to_mono_ns(uint64_t ticks);
/* Re-estimate the ratio now (cheap: two clock reads); at least min_span_ns must have passed since
 * the reference, else it busy-waits until then (0: never wait). */
void rmrec_ticks_calibrate(uint64_t min_span_ns);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
