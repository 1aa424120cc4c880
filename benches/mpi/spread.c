/*
 * OpenMPI yardstick for `jitccl perf all_gather|reduce_scatter|broadcast`: times
 * MPI_Allgather, MPI_Reduce_scatter_block (float sum) or MPI_Bcast (root 0) of floats, out
 * of place where the collective has two buffers, and prints one line per size in the units
 * jitccl uses.
 *
 *   mpirun -np N ./spread -c all_gather|reduce_scatter|broadcast [-w W] [-i I] SIZE...
 *
 * SIZE counts bytes as `jitccl perf` and nccl-tests do (K/M/G suffixes, powers of 1024):
 * AllGather's whole output (n blocks), ReduceScatter's whole input (n blocks), Broadcast's
 * buffer. MPI_Allreduce is benches/mpi/allreduce.c's, MPI_Alltoall benches/mpi/moves.c's.
 *
 * Rank 0 prints, per size:  bytes  time_us  algbw_GBps  busbw_GBps  wrong  warmup  iters
 * where time is the slowest rank's per-iteration average, algbw = bytes / time and busbw =
 * algbw * (n-1)/n (Broadcast: * 1) as in nccl-tests. `wrong` counts result elements, over
 * all ranks, that differ from the expected ones in one checked call per size on a poisoned
 * output (exit status 1 if any).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

enum coll { ALLGATHER, REDUCE_SCATTER, BROADCAST };

/* Element i of rank `src`'s contribution to block `blk`: small integers, so every sum over
 * ranks is exact in float and the check can use ==; different per block and index, so a
 * misplaced block shows. */
static float value(int src, int blk, size_t i) { return (float)((src + 1) * (blk * 8 + (int)(i % 7) + 1)); }

/* What rank `rank` holds after the collective, at element i of block `blk`. */
static float expected(enum coll c, int n, int rank, int blk, size_t i) {
    switch (c) {
    case ALLGATHER: return value(blk, 0, i);
    case REDUCE_SCATTER: return (float)(n * (n + 1) / 2) * value(0, rank, i);
    default: return value(0, 0, i);
    }
}

static void run(enum coll c, float *send, float *recv, int count) {
    switch (c) {
    case ALLGATHER: MPI_Allgather(send, count, MPI_FLOAT, recv, count, MPI_FLOAT, MPI_COMM_WORLD); break;
    case REDUCE_SCATTER: MPI_Reduce_scatter_block(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
    case BROADCAST: MPI_Bcast(recv, count, MPI_FLOAT, 0, MPI_COMM_WORLD); break;
    }
}

/* Fills what the collective reads: AllGather's one block, ReduceScatter's n blocks, and
 * Broadcast's buffer on the root (poisoned elsewhere, so that a missing copy shows). */
static void fill(enum coll c, int rank, int n, float *send, float *recv, int count) {
    switch (c) {
    case ALLGATHER:
        for (int i = 0; i < count; i++) send[i] = value(rank, 0, (size_t)i);
        break;
    case REDUCE_SCATTER:
        for (int q = 0; q < n; q++)
            for (int i = 0; i < count; i++) send[(size_t)q * count + i] = value(rank, q, (size_t)i);
        break;
    case BROADCAST:
        for (int i = 0; i < count; i++) recv[i] = rank == 0 ? value(0, 0, (size_t)i) : __builtin_nanf("");
        break;
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    /* In the order of enum coll. */
    const char *const names[] = {"all_gather", "reduce_scatter", "broadcast"};
    const int split[] = {1, 1, 0};
    int warmup = 20, iters = 100, k;
    size_t sizes[MAX_SIZES];
    int nsizes = parse_command(argc, argv, rank, n, "spread", names, split, 3, &k, &warmup, &iters, sizes);
    enum coll c = (enum coll)k;
    float *send, *recv;
    alloc_buffers(sizes, nsizes, rank, "spread", &send, &recv);
    if (rank == 0) {
        const char *names[] = {"MPI_Allgather", "MPI_Reduce_scatter_block sum", "MPI_Bcast"};
        printf("# %s float, %d ranks, root 0\n", names[c], n);
        printf("# %12s %10s %8s %8s %8s %6s %6s\n", "size(B)", "time(us)", "algbw", "busbw", "#wrong", "warmup", "iters");
    }
    int failed = 0;
    for (int s = 0; s < nsizes; s++) {
        /* One block: AllGather's and ReduceScatter's per-rank share, Broadcast's whole buffer. */
        int blocks = c == BROADCAST ? 1 : n;
        int count = (int)(sizes[s] / sizeof(float) / (size_t)blocks);
        size_t bytes = (size_t)count * blocks * sizeof(float);
        fill(c, rank, n, send, recv, count);
        for (int i = 0; i < warmup; i++) run(c, send, recv, count);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < iters; i++) run(c, send, recv, count);
        double us = (MPI_Wtime() - t0) * 1e6 / iters, max_us;
        MPI_Reduce(&us, &max_us, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);

        /* One checked call on a poisoned output (NaN never equals a value). */
        int out_blocks = c == ALLGATHER ? n : 1;
        for (size_t i = 0; i < (size_t)count * out_blocks; i++) recv[i] = __builtin_nanf("");
        fill(c, rank, n, send, recv, count);
        run(c, send, recv, count);
        long long wrong = 0;
        for (int q = 0; q < out_blocks; q++)
            for (int i = 0; i < count; i++)
                if (recv[(size_t)q * count + i] != expected(c, n, rank, q, (size_t)i)) wrong++;
        report(rank, wrong, bytes, max_us, c == BROADCAST ? 1.0 : (double)(n - 1) / n, warmup, iters, &failed);
    }
    MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
    free(send);
    free(recv);
    MPI_Finalize();
    return failed;
}
