/* What the MPI side-by-side programs share: their command line (sizes with K/M/G suffixes,
 * the -w WARMUP / -i ITERS counts) and their result line. */
#ifndef JITCCL_BENCH_MPI_COMMON_H
#define JITCCL_BENCH_MPI_COMMON_H

#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bytes in "8", "64K", "16M", "1G"; 0 for anything else. */
static size_t parse_size(const char *s) {
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s) return 0;
    switch (*end) {
    case 'k': case 'K': v <<= 10; end++; break;
    case 'm': case 'M': v <<= 20; end++; break;
    case 'g': case 'G': v <<= 30; end++; break;
    default: break;
    }
    return *end ? 0 : (size_t)v;
}

/* Takes "-w N" or "-i N" at argv[*a] into *warmup or *iters (advancing *a past N) and
 * returns 1; 0 if argv[*a] is neither. A bad count ends every rank: warmup may be 0, timed
 * iterations may not. */
static int parse_count(int argc, char **argv, int *a, int rank, const char *prog, int *warmup, int *iters) {
    const char *flag = argv[*a];
    if (strcmp(flag, "-w") && strcmp(flag, "-i")) return 0;
    char *end = NULL;
    long v = *a + 1 < argc ? strtol(argv[*a + 1], &end, 10) : -1;
    if (!end || *end || v < (flag[1] == 'w' ? 0 : 1)) {
        if (rank == 0) fprintf(stderr, "%s: %s needs a count (warmup >= 0, iters >= 1)\n", prog, flag);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (flag[1] == 'w') *warmup = (int)v; else *iters = (int)v;
    (*a)++;
    return 1;
}

/* The most sizes one run takes. */
#define MAX_SIZES 64

/* Reads "-c NAME [-w W] [-i I] SIZE..." for a program of several collectives: NAME's index
 * in `names` into *coll, the counts as parse_count does, and every SIZE (at least one float
 * for each of the n ranks where split[*coll] says the collective splits its buffer among
 * them, else one float; at most INT_MAX floats and MAX_SIZES sizes) into `sizes`; returns
 * how many sizes. A wrong command line ends every rank, the usage said once. */
static inline int parse_command(int argc, char **argv, int rank, int n, const char *prog, const char *const *names,
                                const int *split, int nnames, int *coll, int *warmup, int *iters, size_t *sizes) {
    int nsizes = 0;
    *coll = -1;
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "-c") && a + 1 < argc) {
            a++;
            *coll = -1;
            for (int k = 0; k < nnames; k++)
                if (!strcmp(argv[a], names[k])) *coll = k;
            continue;
        }
        if (parse_count(argc, argv, &a, rank, prog, warmup, iters)) continue;
        size_t b = parse_size(argv[a]);
        if (b < sizeof(float) || b / sizeof(float) > INT_MAX || nsizes == MAX_SIZES) {
            if (rank == 0) fprintf(stderr, "%s: bad or too many sizes at '%s'\n", prog, argv[a]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        sizes[nsizes++] = b;
    }
    for (int s = 0; *coll >= 0 && split[*coll] && s < nsizes; s++)
        if (sizes[s] < sizeof(float) * (size_t)n) {
            if (rank == 0) fprintf(stderr, "%s: %s needs at least one float a rank (%zu B)\n", prog, names[*coll], sizes[s]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    if (*coll < 0 || nsizes == 0) {
        if (rank == 0) {
            fprintf(stderr, "usage: %s -c ", prog);
            for (int k = 0; k < nnames; k++) fprintf(stderr, "%s%s", k ? "|" : "", names[k]);
            fprintf(stderr, " [-w W] [-i I] SIZE...\n");
        }
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return nsizes;
}

/* Two float buffers of the largest of the `nsizes` sizes (bytes), every page touched now so
 * that page faults stay out of the timed loops; returns their length in floats. Ends every
 * rank where they cannot be had. */
static inline size_t alloc_buffers(const size_t *sizes, int nsizes, int rank, const char *prog, float **send,
                                   float **recv) {
    size_t max_all = 0;
    for (int s = 0; s < nsizes; s++)
        if (sizes[s] / sizeof(float) > max_all) max_all = sizes[s] / sizeof(float);
    *send = malloc(max_all * sizeof(float));
    *recv = malloc(max_all * sizeof(float));
    if (!*send || !*recv) {
        fprintf(stderr, "%s: rank %d cannot allocate 2 x %zu bytes\n", prog, rank, max_all * sizeof(float));
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    memset(*send, 0, max_all * sizeof(float));
    memset(*recv, 0, max_all * sizeof(float));
    return max_all;
}

/* Sums every rank's count of wrong elements on rank 0, which prints the size's line
 * (busbw = algbw x bus_factor) and sets *failed where any was wrong. */
static void report(int rank, long long wrong, size_t bytes, double max_us, double bus_factor, int warmup, int iters,
                   int *failed) {
    long long wrong_all = 0;
    MPI_Reduce(&wrong, &wrong_all, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank != 0) return;
    double algbw = (double)bytes / max_us / 1e3; /* bytes/us/1e3 = GB/s */
    printf("  %12zu %10.2f %8.2f %8.2f %8lld %6d %6d\n", bytes, max_us, algbw, algbw * bus_factor, wrong_all, warmup,
           iters);
    fflush(stdout);
    if (wrong_all) *failed = 1;
}

#endif
