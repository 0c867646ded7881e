/* halo2d.c -- 2-D periodic halo exchange; see halo.h for usage and expected traffic. */
#include "halo.h"
int main(int argc, char **argv) { return halo_main(argc, argv, 2); }
