/*
 * OpenMPI yardstick for `jitccl perf all_to_all|all_to_allv|gather|scatter|sendrecv`:
 * times MPI_Alltoall, MPI_Alltoallv (even blocks), MPI_Gather, MPI_Scatter or MPI_Sendrecv
 * (to rank + 1, from rank - 1, as jitccl's sendrecv) of floats, out of place, and prints
 * one line per size in the units jitccl uses.
 *
 *   mpirun -np N ./moves -c all_to_all|all_to_allv|gather|scatter|sendrecv [-w W] [-i I] SIZE...
 *
 * SIZE is the whole buffer of n blocks, as `jitccl perf` and nccl-tests count it (K/M/G
 * suffixes, powers of 1024); a block is SIZE / n bytes (sendrecv: one block of SIZE). The
 * root is rank 0.
 *
 * Rank 0 prints, per size:  bytes  time_us  algbw_GBps  busbw_GBps  wrong  warmup  iters
 * where time is the slowest rank's per-iteration average, algbw = bytes / time and busbw =
 * algbw * (n-1)/n as in nccl-tests. `wrong` counts result elements, over all ranks, that
 * differ from the expected ones in one checked call per size (exit status 1 if any).
 */
#include <limits.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

enum coll { ALLTOALL, ALLTOALLV, GATHER, SCATTER, SENDRECV };

/* Element i of the block rank `src` sends rank `dst`: exact in float, and different for
 * every (src, dst, i % 4096), so that a misplaced block shows. */
static float value(int src, int dst, size_t i) { return (float)(src * 65536 + dst * 4096 + (int)(i % 4096)); }

/* Alltoallv's counts and displacements (even blocks), per peer. */
static int *counts, *displs;

static void run(enum coll c, float *send, float *recv, int count) {
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    switch (c) {
    case ALLTOALL: MPI_Alltoall(send, count, MPI_FLOAT, recv, count, MPI_FLOAT, MPI_COMM_WORLD); break;
    case ALLTOALLV:
        for (int q = 0; q < n; q++) {
            counts[q] = count;
            displs[q] = q * count;
        }
        MPI_Alltoallv(send, counts, displs, MPI_FLOAT, recv, counts, displs, MPI_FLOAT, MPI_COMM_WORLD);
        break;
    case SENDRECV:
        MPI_Sendrecv(send, count, MPI_FLOAT, (rank + 1) % n, 0, recv, count, MPI_FLOAT, (rank + n - 1) % n, 0,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        break;
    case GATHER: MPI_Gather(send, count, MPI_FLOAT, recv, count, MPI_FLOAT, 0, MPI_COMM_WORLD); break;
    case SCATTER: MPI_Scatter(send, count, MPI_FLOAT, recv, count, MPI_FLOAT, 0, MPI_COMM_WORLD); break;
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    /* In the order of enum coll. */
    const char *const names[] = {"all_to_all", "all_to_allv", "gather", "scatter", "sendrecv"};
    const int split[] = {1, 1, 1, 1, 1};
    int warmup = 20, iters = 100, k;
    size_t sizes[MAX_SIZES];
    int nsizes = parse_command(argc, argv, rank, n, "moves", names, split, 5, &k, &warmup, &iters, sizes);
    enum coll c = (enum coll)k;
    float *send, *recv;
    alloc_buffers(sizes, nsizes, rank, "moves", &send, &recv);
    counts = malloc(n * sizeof(int));
    displs = malloc(n * sizeof(int));
    if (!counts || !displs) {
        fprintf(stderr, "moves: rank %d cannot allocate its counts\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (rank == 0) {
        const char *names[] = {"MPI_Alltoall", "MPI_Alltoallv", "MPI_Gather", "MPI_Scatter", "MPI_Sendrecv"};
        printf("# %s float, out-of-place, %d ranks, root 0\n", names[c], n);
        printf("# %12s %10s %8s %8s %8s %6s %6s\n", "size(B)", "time(us)", "algbw", "busbw", "#wrong", "warmup", "iters");
    }
    int failed = 0;
    for (int s = 0; s < nsizes; s++) {
        int blocks = c == SENDRECV ? 1 : n;
        int count = (int)(sizes[s] / sizeof(float) / (size_t)blocks); /* one block */
        size_t bytes = (size_t)count * blocks * sizeof(float);
        /* Block q of a rank's send buffer goes to rank q (Gather: the one block to the root;
           Sendrecv: the one block to rank + 1). */
        for (int q = 0; q < blocks; q++)
            for (int i = 0; i < count; i++)
                send[(size_t)q * count + i] =
                    value(rank, c == GATHER ? 0 : c == SENDRECV ? (rank + 1) % n : q, (size_t)i);
        for (int i = 0; i < warmup; i++) run(c, send, recv, count);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < iters; i++) run(c, send, recv, count);
        double us = (MPI_Wtime() - t0) * 1e6 / iters, max_us;
        MPI_Reduce(&us, &max_us, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);

        for (size_t i = 0; i < bytes / sizeof(float); i++) recv[i] = __builtin_nanf("");
        run(c, send, recv, count);
        long long wrong = 0;
        int nblocks = c == SCATTER || c == SENDRECV ? 1 : (c == GATHER && rank != 0) ? 0 : n;
        for (int q = 0; q < nblocks; q++)
            for (int i = 0; i < count; i++) {
                int src = c == SCATTER ? 0 : c == SENDRECV ? (rank + n - 1) % n : q, dst = c == GATHER ? 0 : rank;
                if (recv[(size_t)q * count + i] != value(src, dst, (size_t)i)) wrong++;
            }
        report(rank, wrong, bytes, max_us, c == SENDRECV ? 1.0 : (double)(n - 1) / n, warmup, iters, &failed);
    }
    MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
    free(send);
    free(recv);
    free(counts);
    free(displs);
    MPI_Finalize();
    return failed;
}
