/*
 * flatscan.h -- an exact search of a FAISS IndexFlatIP/IndexFlatL2 split into row slices run in
 * parallel (sg_par.h): how one lone query uses every core instead of one.
 *
 * Each slice is scanned in blocks of rows, one product per block (sgemm as FAISS's own BLAS
 * path does, or an AVX2 or AVX-512 kernel that skips sgemm's packing: flatscan.c), keeping the k best per
 * query; the slices' lists are then merged. Results are in the
 * canonical order sg_flatscan_canonical() also gives FAISS's own results: best score first,
 * equal scores by increasing id, and among equal scores at the k-th place the lowest ids kept
 * (FAISS keeps the first rows it sees), so both paths return the same list.
 */
#ifndef SG_LOCAL_FLATSCAN_H
#define SG_LOCAL_FLATSCAN_H

#include "faissidx.h"
#include "sg_par.h"

#include <stddef.h>
#include <stdint.h>

typedef struct st_sg_flatscan_t {
    const float *xb; /* ntotal * dim floats, owned by the FAISS index */
    int64_t ntotal;
    int dim;
    int metric; /* SG_FIDX_IP or SG_FIDX_L2 */
    int kernel; /* SG_FLATSCAN_*: sgemm after init; the owner sets sg_flatscan_pick()'s choice */
} sg_flatscan_t;

/** 0 when `ix` is a flat IP/L2 index whose vectors can be read directly; -1 otherwise. */
int sg_flatscan_init(sg_flatscan_t *fs, const sg_fidx_t *ix);
/** Like sg_fidx_search, over `par`'s threads. Returns 0, or -1 with `err` set (out of memory). */
int sg_flatscan_search(const sg_flatscan_t *fs, sg_par_t *par, size_t n, const float *x, int k, float *dist, int64_t *labels,
                       char *err, size_t err_size);
enum { SG_FLATSCAN_SGEMM = 0, SG_FLATSCAN_AVX2 = 1, SG_FLATSCAN_AVX512 = 2 };

/** The kernel for vectors of `dim` floats on a CPU with `features` (SG_CPU_* bits, lib/blas.h):
 * SG_FLATSCAN_AVX512 (in place) with AVX-512 F and DQ, AVX2 and FMA and `dim` a multiple of 16;
 * else SG_FLATSCAN_AVX2 (in place) with AVX2 and FMA and `dim` a multiple of 8; else
 * SG_FLATSCAN_SGEMM (the BLAS, as FAISS). */
int sg_flatscan_pick(uint32_t features, int dim);
/** "avx512", "avx2" or "sgemm". */
const char *sg_flatscan_kernel_name(int kernel);
/** Puts each query's k results in the canonical order (see above); -1 labels stay last. */
void sg_flatscan_canonical(int metric, size_t n, int k, float *dist, int64_t *labels);

#endif
