/*
 * OpenMPI yardstick for `jitccl perf all_reduce`: times MPI_Allreduce of floats with
 * MPI_SUM, out of place, and prints one line per size in the units jitccl uses.
 *
 *   mpirun -np N ./allreduce [-w WARMUP] [-i ITERS] [SIZE...]
 *
 * SIZE takes K/M/G suffixes (powers of 1024, like jitccl and nccl-tests); the default
 * list is 8 16M 256M. Without -w/-i the iteration counts shrink with the size, so that
 * the large sizes do not dominate the run time. tools/compare-mpi.sh passes explicit
 * counts so that MPI and jitccl run the same number of iterations.
 *
 * Rank 0 prints, per size:  bytes  time_us  algbw_GBps  busbw_GBps  wrong
 * where time is the slowest rank's per-iteration average (a collective is as slow as its
 * slowest rank), algbw = bytes / time and busbw = algbw * 2(n-1)/n as in nccl-tests.
 * `wrong` counts result elements, over all ranks, that differ from the expected sum in
 * one checked call per size. The exit status is 1 when any element was wrong.
 */
#include <limits.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

/* Small integers, so every partial sum is exact in float and the check can use ==.
 * The value depends on the index too, so that misplaced blocks are caught. */
static float input(int rank, size_t i) { return (float)((rank + 1) * (int)(i % 7 + 1)); }
static float expected(int nranks, size_t i) { return (float)(nranks * (nranks + 1) / 2 * (int)(i % 7 + 1)); }

/* Default counts: many iterations where a call takes microseconds, few where it moves
 * hundreds of MiB (a 256 MiB call takes tens to hundreds of ms on a small machine). */
static int default_iters(size_t bytes) {
    if (bytes <= (64u << 10)) return 1000;
    if (bytes <= (1u << 20)) return 200;
    if (bytes <= (32u << 20)) return 40;
    return 10;
}
static int default_warmup(size_t bytes) {
    if (bytes <= (64u << 10)) return 100;
    if (bytes <= (32u << 20)) return 5;
    return 2;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, nranks;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);

    int warmup = -1, iters = -1;
    size_t sizes[64];
    int nsizes = 0;
    for (int a = 1; a < argc; a++) {
        if (parse_count(argc, argv, &a, rank, "allreduce", &warmup, &iters)) continue;
        size_t b = parse_size(argv[a]);
        /* MPI counts are int. */
        if (b < sizeof(float) || b / sizeof(float) > INT_MAX || nsizes == 64) {
            if (rank == 0) fprintf(stderr, "allreduce: bad or too many sizes at '%s' (expected e.g. 8 64K 16M 1G)\n", argv[a]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        sizes[nsizes++] = b;
    }
    if (nsizes == 0) {
        sizes[nsizes++] = 8;
        sizes[nsizes++] = 16u << 20;
        sizes[nsizes++] = 256u << 20;
    }

    size_t max_count = 0;
    for (int s = 0; s < nsizes; s++)
        if (sizes[s] / sizeof(float) > max_count) max_count = sizes[s] / sizeof(float);
    float *send = malloc(max_count * sizeof(float));
    float *recv = malloc(max_count * sizeof(float));
    if (!send || !recv) {
        fprintf(stderr, "allreduce: rank %d cannot allocate 2 x %zu bytes\n", rank, max_count * sizeof(float));
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    /* Touch every page now, so that page faults stay out of the timed loop. */
    for (size_t i = 0; i < max_count; i++) send[i] = input(rank, i);
    memset(recv, 0, max_count * sizeof(float));

    if (rank == 0) {
        char lib[MPI_MAX_LIBRARY_VERSION_STRING];
        int len;
        MPI_Get_library_version(lib, &len);
        char *nl = strchr(lib, '\n');
        if (nl) *nl = 0;
        printf("# MPI_Allreduce float sum, out-of-place, %d ranks; %s\n", nranks, lib);
        printf("# %12s %10s %8s %8s %8s %6s %6s\n", "size(B)", "time(us)", "algbw", "busbw", "#wrong", "warmup", "iters");
    }

    int failed = 0;
    for (int s = 0; s < nsizes; s++) {
        size_t bytes = sizes[s] / sizeof(float) * sizeof(float);
        int count = (int)(bytes / sizeof(float));
        int w = warmup >= 0 ? warmup : default_warmup(bytes);
        int it = iters > 0 ? iters : default_iters(bytes);

        for (int i = 0; i < w; i++)
            MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        /* Start together, so that no rank's clock includes waiting for a late peer. */
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < it; i++)
            MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double us = (MPI_Wtime() - t0) * 1e6 / it, max_us;
        MPI_Reduce(&us, &max_us, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);

        /* One checked call on a poisoned output buffer (NaN never equals the sum). */
        for (int i = 0; i < count; i++) recv[i] = __builtin_nanf("");
        MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        long long wrong = 0;
        for (int i = 0; i < count; i++)
            if (recv[i] != expected(nranks, (size_t)i)) wrong++;
        report(rank, wrong, bytes, max_us, 2.0 * (nranks - 1) / nranks, w, it, &failed);
    }
    MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
    free(send);
    free(recv);
    MPI_Finalize();
    return failed;
}
