/*
 * flatscan.h -- an exact search of a FAISS IndexFlatIP/IndexFlatL2 split into row slices run in
 * parallel (sg_par.h): how one lone query uses every core instead of one.
 *
 * Each slice is scanned in blocks of rows, one product per block (sgemm as FAISS's own BLAS
 * path does, or an AVX2 kernel that skips sgemm's packing: flatscan.c), keeping the k best per
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
} sg_flatscan_t;

/** 0 when `ix` is a flat IP/L2 index whose vectors can be read directly; -1 otherwise. */
int sg_flatscan_init(sg_flatscan_t *fs, const sg_fidx_t *ix);
/** Like sg_fidx_search, over `par`'s threads. Returns 0, or -1 with `err` set (out of memory). */
int sg_flatscan_search(const sg_flatscan_t *fs, sg_par_t *par, size_t n, const float *x, int k, float *dist, int64_t *labels,
                       char *err, size_t err_size);
/** The kernel the scan multiplies with for vectors of `dim` floats: "avx2" (in place, CPUs with
 * AVX2 and FMA but not AVX-512) or "sgemm" (the BLAS, as FAISS). */
const char *sg_flatscan_kernel(int dim);
/** Benchmarks: force "sgemm" or "avx2" (-1 when this CPU cannot run it), NULL for the CPU's choice.
 * Not thread-safe: call before any search. */
int sg_flatscan_set_kernel(const char *name);
/** Puts each query's k results in the canonical order (see above); -1 labels stay last. */
void sg_flatscan_canonical(int metric, size_t n, int k, float *dist, int64_t *labels);

#endif
