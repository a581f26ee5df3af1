/*
 * bench_faiss.c -- FAISS search cost through the C API on one thread: ms per query for a Flat
 * IP index (and optionally HNSW32) at nq = 1, 8, 32, with FAISS's default BLAS threshold (20)
 * and with 1, then the local backend's own scan (flatscan.c) with each kernel this CPU runs.
 * Used to decide whether an AVX2 rebuild of libfaiss pays (link the same object against
 * libfaiss.a or libfaiss_avx2.a) and which kernel the scan should use. Not a test.
 *
 *     bench_faiss INDEX_FILE [seconds per point]      (queries are random unit vectors)
 */
#include "blas.h"
#include "faissidx.h"
#include "flatscan.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s INDEX [seconds]\n", argv[0]);
        return 2;
    }
    double secs = argc > 2 ? strtod(argv[2], NULL) : 2.0;
    openblas_set_num_threads(1);
    omp_set_num_threads(1);
    sg_fidx_t ix;
    char err[512];
    double t0 = now_s();
    if (sg_fidx_open(argv[1], NULL, &ix, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    printf("read %s (%s, %lld x %d) in %.2f s\n", argv[1], ix.fourcc, (long long)ix.ntotal, ix.dim, now_s() - t0);
    enum { MAXQ = 32, K = 10 };
    float *q = malloc(sizeof(float) * MAXQ * (size_t)ix.dim), dist[MAXQ * K];
    int64_t lab[MAXQ * K];
    srand(5);
    for (int i = 0; i < MAXQ; ++i) {
        double n = 0;
        for (int d = 0; d < ix.dim; ++d) {
            q[i * ix.dim + d] = (float)rand() / RAND_MAX - 0.5f;
            n += q[i * ix.dim + d] * q[i * ix.dim + d];
        }
        for (int d = 0; d < ix.dim; ++d)
            q[i * ix.dim + d] /= (float)sqrt(n);
    }
    const int thresholds[] = {20, 1}, nqs[] = {1, 8, 32};
    for (int t = 0; t < 2; ++t) {
        sg_fidx_set_blas_threshold(thresholds[t]);
        for (int j = 0; j < 3; ++j) {
            int nq = nqs[j];
            sg_fidx_search(&ix, (size_t)nq, q, K, dist, lab, err, sizeof(err));
            long n = 0;
            double s = now_s(), e;
            do {
                if (sg_fidx_search(&ix, (size_t)nq, q, K, dist, lab, err, sizeof(err)) != 0) {
                    fprintf(stderr, "%s\n", err);
                    return 1;
                }
                n += nq;
                e = now_s();
            } while (e - s < secs);
            printf("blas_threshold %2d  nq %2d: %7.2f ms per query\n", thresholds[t], nq, (e - s) * 1000.0 / (double)n);
        }
    }
    /* the local backend's own scan of a flat index (flatscan.c), one thread, each kernel this CPU
     * can run; thread CPU time beside wall time, so a busy machine still compares the kernels */
    sg_flatscan_t fs;
    if (sg_flatscan_init(&fs, &ix) == 0) {
        sg_cpu_t cpu;
        sg_cpu_read(&cpu);
        /* sgemm, then each in-place kernel up to the one the CPU gets (AVX-512 CPUs run AVX2 too) */
        int best = sg_flatscan_pick(cpu.features, ix.dim);
        const int kernels[] = {SG_FLATSCAN_SGEMM, SG_FLATSCAN_AVX2, SG_FLATSCAN_AVX512};
        const int fnq[] = {1, 8, 22, 32};
        for (int kk = 0; kk < 3; ++kk) {
            if (kk > 0 && (best == SG_FLATSCAN_SGEMM || kernels[kk] > best || ix.dim % (kk == 1 ? 8 : 16) != 0))
                break;
            fs.kernel = kernels[kk];
            for (int j = 0; j < 4; ++j) {
                int nq = fnq[j];
                long n = 0;
                double s = now_s(), c = cpu_s(), e;
                do {
                    if (sg_flatscan_search(&fs, NULL, (size_t)nq, q, K, dist, lab, err, sizeof(err)) != 0) {
                        fprintf(stderr, "%s\n", err);
                        return 1;
                    }
                    n += nq;
                    e = now_s();
                } while (e - s < secs);
                double cpu = cpu_s() - c;
                printf("flatscan %-5s     nq %2d: %7.2f ms per query (CPU %.2f ms, %.1f GFLOP/s)\n",
                       sg_flatscan_kernel_name(fs.kernel), nq, (e - s) * 1000.0 / (double)n, cpu * 1000.0 / (double)n,
                       2.0 * (double)ix.ntotal * ix.dim * (double)n / cpu / 1e9);
            }
        }
    }
    sg_fidx_close(&ix);
    free(q);
    return 0;
}
