/*
 * treematch_probe: ask Open MPI's topo/treematch component to reorder ranks for a traffic matrix.
 *
 * Why this exists: bench/mapping_quality.py compares rankmap's placements with other mappers, all
 * scored by rankmap's own cost model. Treematch is only reachable from inside an MPI job, through
 * MPI_Dist_graph_create(..., reorder = 1), so this program is the smallest job that hands it a
 * weighted communication graph and reports the permutation it chose.
 *
 * Usage:  mpirun -np N treematch_probe MATRIX
 *
 * MATRIX is text: the rank count n, then n*n numbers (row src, column dst, bytes from src to dst).
 * Every rank reads the whole file and declares its own outgoing edges, weighted by bytes scaled so
 * the heaviest edge weighs 1 000 000 (MPI weights are ints; the scale is the same on every rank, so
 * relative weights survive). treematch adds a rank's in- and out-edges and symmetrises, so it sees
 * T + T^T, which is also what rankmap's solvers see up to the direction of each link.
 *
 * Output (rank 0, on stdout), one line per process of MPI_COMM_WORLD:
 *     proc OLD local LOCAL new NEW
 * where NEW is the rank that process holds in the reordered communicator, then
 *     reordered yes|no
 *     seconds S        (slowest process's time in MPI_Dist_graph_create)
 * The process that holds new rank r plays rank r of the matrix, so rank r runs wherever that
 * process runs; bench/mapping_quality.py turns this into a GPU placement.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static void die(const char *msg)
{
    fprintf(stderr, "treematch_probe: %s\n", msg);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

/* Read "n" then n*n doubles; returns the matrix (row-major) and sets *n_out. */
static double *read_matrix(const char *path, int *n_out)
{
    FILE *f = fopen(path, "r");
    if (!f)
        die("cannot open the matrix file");
    int n = 0;
    if (fscanf(f, "%d", &n) != 1 || n <= 0)
        die("the matrix file must start with the rank count");
    double *t = malloc((size_t)n * (size_t)n * sizeof *t);
    if (!t)
        die("out of memory");
    for (long i = 0; i < (long)n * n; i++)
        if (fscanf(f, "%lf", &t[i]) != 1)
            die("the matrix file holds fewer than n*n numbers");
    fclose(f);
    *n_out = n;
    return t;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc != 2)
        die("usage: treematch_probe MATRIX");

    int n;
    double *t = read_matrix(argv[1], &n);
    if (n != size)
        die("the matrix rank count differs from the number of processes");

    double tmax = 0.0;
    for (long i = 0; i < (long)n * n; i++)
        if (t[i] > tmax)
            tmax = t[i];

    /* This rank's outgoing edges, weights scaled to ints (at least 1 for any nonzero traffic). */
    int degree = 0;
    int *dest = malloc((size_t)n * sizeof *dest);
    int *weight = malloc((size_t)n * sizeof *weight);
    if (!dest || !weight)
        die("out of memory");
    for (int j = 0; j < n; j++) {
        double b = t[(long)rank * n + j];
        if (j == rank || b <= 0.0)
            continue;
        int w = (int)(b / tmax * 1000000.0 + 0.5);
        dest[degree] = j;
        weight[degree] = w > 0 ? w : 1;
        degree++;
    }

    MPI_Comm graph;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    int sources[1] = {rank};
    int degrees[1] = {degree};
    MPI_Dist_graph_create(MPI_COMM_WORLD, 1, sources, degrees, dest, weight, MPI_INFO_NULL, 1, &graph);
    double dt = MPI_Wtime() - t0, dt_max = 0.0;
    MPI_Reduce(&dt, &dt_max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);

    int newrank;
    MPI_Comm_rank(graph, &newrank);
    /* Open MPI numbers processes on a node by local rank; the leaf a process occupies follows it. */
    const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    int mine[2] = {lr ? atoi(lr) : -1, newrank};
    int *all = rank == 0 ? malloc(2 * (size_t)size * sizeof *all) : NULL;
    MPI_Gather(mine, 2, MPI_INT, all, 2, MPI_INT, 0, MPI_COMM_WORLD);

    if (rank == 0) {
        int moved = 0;
        for (int p = 0; p < size; p++) {
            printf("proc %d local %d new %d\n", p, all[2 * p], all[2 * p + 1]);
            moved |= all[2 * p + 1] != p;
        }
        printf("reordered %s\n", moved ? "yes" : "no");
        printf("seconds %.6f\n", dt_max);
        fflush(stdout);
        free(all);
    }
    MPI_Comm_free(&graph);
    free(dest);
    free(weight);
    free(t);
    MPI_Finalize();
    return 0;
}
