/* The shared tick clock of native/common/rmrec.h against CLOCK_MONOTONIC.
 * usage: ticks_test        prints one "ok ..." line, or "FAIL ..." lines and exits 1.
 * Built twice by tests/test_records.py: as is (the TSC on x86-64) and with -DRMREC_NO_TSC
 * (ticks are CLOCK_MONOTONIC ns: every conversion must be the identity). */
#include "rmrec.h"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int fails;
static void check(int ok, const char *what, double got, double want) {
  if (!ok) { printf("FAIL %s: got %.1f, want %.1f\n", what, got, want); fails++; }
}
static double absd(double x) { return x < 0 ? -x : x; }

int main(void) {
  /* a first conversion before any calibration must already be sane (it waits 1 ms, once) */
  uint64_t t0 = rmrec_ticks(), n0 = rmrec_now_ns();
  uint64_t first = rmrec_ticks_to_ns(1000000);
  struct timespec d = {0, 60 * 1000000};              /* 60 ms */
  nanosleep(&d, NULL);
  uint64_t t1 = rmrec_ticks(), n1 = rmrec_now_ns();
  rmrec_ticks_calibrate(0);
  double dn = (double)(n1 - n0), got = (double)rmrec_ticks_to_ns(t1 - t0);
  /* durations: within 0.5 % (a 1 ms first estimate, refined over 60 ms) plus two clock reads */
  check(absd(got - dn) <= 0.005 * dn + 2000, "60 ms of ticks in ns", got, dn);
  /* points in time: ticks -> CLOCK_MONOTONIC within 100 us */
  uint64_t t2 = rmrec_ticks(), n2 = rmrec_now_ns();
  double mono = (double)rmrec_ticks_to_mono_ns(t2);
  check(absd(mono - (double)n2) <= 100000, "rmrec_ticks_to_mono_ns(now)", mono, (double)n2);
  double early = (double)rmrec_ticks_to_mono_ns(t0);  /* may lie before the clock's reference */
  check(absd(early - (double)n0) <= 100000, "rmrec_ticks_to_mono_ns(start)", early, (double)n0);
  /* ns -> ticks -> ns round trip within 0.01 % */
  uint64_t back = rmrec_ticks_to_ns(rmrec_ns_to_ticks(5000000000ull));
  check(absd((double)back - 5e9) <= 5e5, "5 s through ticks and back", (double)back, 5e9);
  check(first > 0, "first conversion of 10^6 ticks", (double)first, 1.0);
#if RMREC_TICKS_ARE_NS
  check(rmrec_ticks_to_ns(123456789) == 123456789, "identity without a TSC", (double)rmrec_ticks_to_ns(123456789), 123456789.0);
  check(rmrec_ns_to_ticks(987654321) == 987654321, "identity without a TSC (ns -> ticks)", (double)rmrec_ns_to_ticks(987654321), 987654321.0);
#endif
  if (fails) return 1;
  printf("ok ticks_are_ns=%d ns_per_tick=%.6f\n", RMREC_TICKS_ARE_NS, (double)rmrec_ticks_to_ns(1000000000) / 1e9);
  return 0;
}
