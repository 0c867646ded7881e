/*
 * rmrec.h -- rankmap record writer (one per-rank record file, see docs/record-format.md)
 *
 * Shared by the MPI shim (native/mpi) and the NCCL profiler plugin (native/nccl).
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
 *       rmrec_traffic_at(..., ticks) takes an rmrec_ticks() value the caller already has.
 *   uint64_t t0 = rmrec_ticks();  ...  rmrec_call(c, op, payload_bytes, rmrec_ticks() - t0);
 *       One call of an operation: calls += 1, time += ticks, payload += bytes, and the
 *       power-of-two size histogram of op gets payload_bytes.  Hot path, lock-free.
 *   rmrec_comm(c, id, "name", size, world_ranks);   communicator membership (locked, rare)
 *   rmrec_meta(c, "key", "value");                  free-form key/value (locked, rare)
 *   rmrec_flush(c);                                 append a flush now (the thread does it every
 *                                                   RANKMAP_FLUSH_MS, default 1000)
 *   rmrec_close(c);                                 final flush with the finalize marker; c stays
 *                                                   valid (disabled) so racing threads are safe.
 *
 * Environment: RANKMAP_BUCKET_MS (timeline bucket, default 100), RANKMAP_FLUSH_MS (default 1000),
 * RANKMAP_TABLE_SLOTS (traffic hash-table slots, default 262144, power of two).
 * Counters are flushed as deltas; the reader (rankmap.capture.records) sums them.
 * fork(): the child's copy is disabled (it never writes the parent's file).
 */
#ifndef RANKMAP_RMREC_H
#define RANKMAP_RMREC_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RMREC_VERSION   1
#define RMREC_MAX_OPS   256
#define RMREC_HIST_BINS 64     /* bin 0: 0 bytes; bin k>=1: 2^(k-1) <= bytes < 2^k */

enum { RMREC_P2P = 0, RMREC_COLL = 1, RMREC_RMA = 2, RMREC_NCCL = 3, RMREC_NCLASS = 4 };
enum { RMREC_MEM_UNKNOWN = 0, RMREC_MEM_HOST = 1, RMREC_MEM_DEVICE = 2, RMREC_MEM_MANAGED = 3 };
enum { RMREC_SEND = 0, RMREC_RECV = 1 };
enum { RMREC_SRC_MPI = 0, RMREC_SRC_NCCL = 1 };

typedef struct rmrec rmrec_t;

rmrec_t *rmrec_open(const char *dir, const char *source, int world_rank, int world_size);
int  rmrec_op(rmrec_t *c, const char *name);
void rmrec_traffic(rmrec_t *c, int peer, int klass, int op, int mem, int dir,
                   uint64_t bytes, uint64_t msgs);
/* Same, with the caller's rmrec_ticks() reading for the timeline (saves a clock read). */
void rmrec_traffic_at(rmrec_t *c, int peer, int klass, int op, int mem, int dir,
                      uint64_t bytes, uint64_t msgs, uint64_t ticks);
void rmrec_call(rmrec_t *c, int op, uint64_t payload_bytes, uint64_t ticks);
void rmrec_comm(rmrec_t *c, uint64_t id, const char *name, int size, const int *world_ranks);
void rmrec_meta(rmrec_t *c, const char *key, const char *value);
void rmrec_flush(rmrec_t *c);
void rmrec_close(rmrec_t *c);
/* Disable capture with one stderr line (first call only); safe from any thread. */
void rmrec_fail(rmrec_t *c, const char *why);
int  rmrec_enabled(const rmrec_t *c);
/* Monotonic clock in nanoseconds (CLOCK_MONOTONIC). */
uint64_t rmrec_now_ns(void);

/* Cheap timestamp for rmrec_call: the TSC on x86-64 (converted to ns at flush time, the ratio
 * being calibrated against CLOCK_MONOTONIC), CLOCK_MONOTONIC ns elsewhere. */
#if defined(__x86_64__) && !defined(RMREC_NO_TSC)
#include <x86intrin.h>
static inline uint64_t rmrec_ticks(void) { return __rdtsc(); }
#else
static inline uint64_t rmrec_ticks(void) { return rmrec_now_ns(); }
#endif

#ifdef __cplusplus
}
#endif
#endif
