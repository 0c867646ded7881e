/*
 * rmrec_synth.c -- write the record files of a steady all-to-all job with rankmap's real writer
 * (native/common/rmrec.c), on a virtual clock, for bench/ingest.py.
 *
 * Build: cc -O2 -std=gnu11 -DRMREC_NO_TSC -DRMREC_VIRTUAL_CLOCK -I native/common \
 *           bench/rmrec_synth.c native/common/rmrec.c -o rmrec_synth -lpthread
 * Usage: rmrec_synth DIR RANKS BYTES_PER_MS   (RANKMAP_FLUSH_MS, RANKMAP_BUCKET_MS as for a job)
 *   then one line per step on stdin: the virtual second to write up to; it answers "ok <bytes>"
 *   (bytes sent per pair so far) when the files hold everything up to there. EOF closes the files
 *   (the final flush).
 *
 * Every rank sends BYTES_PER_MS to each of the RANKS-1 others every millisecond, counted per
 * timeline bucket (one rmrec_traffic_at call per peer and bucket carries that bucket's bytes and
 * messages, as the writer's counters would sum them) and receives as much.  Calls are counted
 * once per peer and bucket in MPI_Isend and MPI_Irecv (the operation counters see fewer, larger
 * calls than the real job would, which changes none of the rows).  The writer flushes every
 * RANKMAP_FLUSH_MS of virtual time.  Traffic and timeline rows are those a real job of that shape
 * writes, row for row, minus the real job's time.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rmrec.h"

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s DIR RANKS BYTES_PER_MS\n", argv[0]);
    return 2;
  }
  const char *dir = argv[1];
  int ranks = atoi(argv[2]);
  uint64_t per_ms = strtoull(argv[3], NULL, 10);
  const char *b = getenv("RANKMAP_BUCKET_MS"), *f = getenv("RANKMAP_FLUSH_MS");
  uint64_t bucket_ms = b ? strtoull(b, NULL, 10) : 100, flush_ms = f ? strtoull(f, NULL, 10) : 1000;
  if (ranks < 2 || ranks > 64 || !bucket_ms || !flush_ms || flush_ms % bucket_ms) {
    fprintf(stderr, "rmrec_synth: 2..64 ranks, and a flush interval that is a multiple of the bucket\n");
    return 2;
  }
  /* built with RMREC_VIRTUAL_CLOCK the writer starts no flush thread: this program flushes, on the
   * virtual clock, every RANKMAP_FLUSH_MS (which also sizes the writer's timeline ring, as in a job) */
  rmrec_virtual_clock_set(1000000);
  rmrec_t *c[64];
  int op_send[64], op_recv[64];
  for (int r = 0; r < ranks; r++) {
    c[r] = rmrec_open(dir, "mpi", r, ranks);
    if (!c[r]) return 3;
    rmrec_single_writer(c[r], 1);
    op_send[r] = rmrec_op(c[r], "MPI_Isend");
    op_recv[r] = rmrec_op(c[r], "MPI_Irecv");
    rmrec_meta(c[r], "mpi_library", "rmrec_synth (virtual clock)");
  }
  uint64_t t0 = 1000000, now_ms = 0, sent = 0;
  char line[64];
  while (fgets(line, sizeof line, stdin)) {
    uint64_t upto_ms = (uint64_t)(strtod(line, NULL) * 1000.0);
    for (; now_ms + bucket_ms <= upto_ms; now_ms += bucket_ms) {
      uint64_t ns = t0 + now_ms * 1000000ull + bucket_ms * 500000ull;    /* mid-bucket */
      rmrec_virtual_clock_set(ns);
      uint64_t bytes = per_ms * bucket_ms, msgs = bucket_ms;
      for (int r = 0; r < ranks; r++)
        for (int p = 0; p < ranks; p++) {
          if (p == r) continue;
          rmrec_traffic_at(c[r], p, RMREC_P2P, op_send[r], RMREC_MEM_HOST, RMREC_SEND, bytes, msgs, ns);
          rmrec_traffic_at(c[r], p, RMREC_P2P, op_recv[r], RMREC_MEM_HOST, RMREC_RECV, bytes, msgs, ns);
          rmrec_call(c[r], op_send[r], bytes, 10000 * msgs);   /* one call per peer and bucket */
          rmrec_call(c[r], op_recv[r], bytes, 10000 * msgs);
        }
      sent += bytes;
      if ((now_ms + bucket_ms) % flush_ms == 0) {
        rmrec_virtual_clock_set(t0 + (now_ms + bucket_ms) * 1000000ull);
        for (int r = 0; r < ranks; r++) rmrec_flush(c[r]);
      }
    }
    printf("ok %llu\n", (unsigned long long)sent);
    fflush(stdout);
  }
  rmrec_virtual_clock_set(t0 + now_ms * 1000000ull);
  for (int r = 0; r < ranks; r++) rmrec_close(c[r]);
  return 0;
}
