/* The sampling draw of native/mpi/shim_core.h (rm_next_skip: short calls left before the next timed
 * one) against its definition: the number of failures before the first success, each b-bit field
 * of the generator's output a trial that succeeds when the field is zero.  For every b of 1..8 and
 * a few larger ones, the same generator state must give the same draw as the field-by-field loop,
 * and the draws must have the geometric mean (2^b - 1, within 3 %).
 * Built by tests/test_shim.py with the shim's own include paths; prints "ok ..." or "FAIL ..." lines. */
#include "shim_core.h"
#include <stdio.h>

RM_TLS rm_tls_t rm_t;          /* what the header's inline functions read, defined here */
unsigned rm_sample_bits;

static uint32_t by_definition(unsigned b) {
  uint64_t mask = (1ull << b) - 1;
  for (uint32_t skip = 0;;) {
    uint64_t x = rm_rng();
    for (unsigned i = 0; i + b <= 64; i += b, skip++)
      if (!((x >> i) & mask)) return skip;
  }
}

int main(void) {
  static const unsigned bits[] = {1, 2, 3, 4, 5, 6, 7, 8, 12, 16};
  int fails = 0;
  for (size_t k = 0; k < sizeof bits / sizeof *bits; k++) {
    unsigned b = rm_sample_bits = bits[k];
    int n = b <= 8 ? 200000 : 300;
    double sum = 0;
    rm_t.rng = 0x9e3779b97f4a7c15ull * (b + 1);
    for (int i = 0; i < n; i++) {
      uint64_t state = rm_t.rng;
      uint32_t got = rm_next_skip();
      uint64_t after = rm_t.rng;
      rm_t.rng = state;
      uint32_t want = by_definition(b);
      if (got != want || rm_t.rng != after) {
        printf("FAIL b=%u draw %d: %u, by definition %u\n", b, i, got, want);
        return 1;
      }
      sum += got;
    }
    double mean = sum / n, expect = (double)((1ull << b) - 1);
    if (b <= 8 && (mean < 0.97 * expect - 0.01 || mean > 1.03 * expect + 0.01)) {
      printf("FAIL b=%u: mean %.3f, geometric mean %.3f\n", b, mean, expect);
      fails++;
    }
  }
  if (!fails) printf("ok: the draw equals the field-by-field definition for every b\n");
  return fails != 0;
}
