/* halo4d.c -- 4-D periodic halo exchange through per-dimension sub-communicators, like lattice
 * QCD codes; see halo.h for usage and expected traffic. */
#define USE_SUBCOMM 1
#include "halo.h"
int main(int argc, char **argv) { return halo_main(argc, argv, 4); }
