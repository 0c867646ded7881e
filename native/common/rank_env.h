/*
 * rank_env.h -- the environment variables a launcher tells a process its world rank and size in,
 * in the order the NCCL profiler plugin and the CUDA activity library read them (the first one set
 * to a number wins).
 *
 *   RANK / WORLD_SIZE                        torchrun, and programs that set their own
 *   OMPI_COMM_WORLD_RANK / _SIZE             Open MPI's mpirun
 *   PMI_RANK / PMI_SIZE                      MPICH's hydra (its default PMI mode), Intel MPI
 *   PMI_ID                                   hydra with -pmi-port: it sets no PMI_RANK and no size,
 *                                            only PMI_ID (the rank it hands out over PMI_PORT)
 *   PMIX_RANK                                PMIx launchers (prterun, srun --mpi=pmix)
 *   SLURM_PROCID / SLURM_NTASKS              srun (after the PMI variables: under hydra's Slurm
 *                                            launcher these count hydra's proxies, not the ranks)
 *
 * A local rank (MPI_LOCALRANKID, OMPI_COMM_WORLD_LOCAL_RANK) is not a world rank and is not read.
 */
#ifndef RANKMAP_RANK_ENV_H
#define RANKMAP_RANK_ENV_H

#define RM_RANK_ENV { "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMI_ID", "PMIX_RANK", "SLURM_PROCID", NULL }
#define RM_SIZE_ENV { "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", NULL }

#endif
