/*
 * faissidx.h -- a FAISS index behind the FAISS C API (libfaiss_c built from Debian's faiss
 * source): open any index file (Flat IP/L2, IVF, HNSW, PQ, ...), learn its dimension and metric,
 * apply search parameters ("nprobe=16,efSearch=128") and search in batches.
 *
 * Thread-safety: after sg_fidx_open returns, sg_fidx_search may run on any number of threads at
 * once (FAISS CPU indexes are safe for concurrent searches).
 */
#ifndef SG_LOCAL_FAISSIDX_H
#define SG_LOCAL_FAISSIDX_H

#include "faiss_ext.h"
#include "gpuhost.h"

#include <stddef.h>
#include <stdint.h>

enum { SG_FIDX_IP = 0, SG_FIDX_L2 = 1, SG_FIDX_OTHER = 2 };

typedef struct st_sg_fidx_t {
    void *index; /* FaissIndex * */
    int dim;
    int64_t ntotal;
    int metric;                    /* SG_FIDX_* */
    char fourcc[8];                /* the index type tag at the start of the file, e.g. "IxFI" */
    uint64_t file_size, file_hash; /* content fingerprint (sg__e5_fingerprint) */
    sg_fext_info_t info;           /* kind (Flat, IVF, HNSW), nlist, nprobe, efSearch, mapped lists */
    int prefetch_off;              /* the per-search prefetch threads of mapped lists were turned off */
    sg_gpu_flatfile_t rerank;      /* sg_fidx_open_rerank: the mapped Flat file candidates are re-scored from */
} sg_fidx_t;

/** Per-call search parameters: 0 means the index's own value / no re-ranking. */
typedef struct st_sg_fidx_sp_t {
    int nprobe;     /* IVF */
    int ef_search;  /* HNSW */
    int rerank;     /* > 0: fetch k * rerank candidates and re-score them exactly from the rerank file */
    int candidates; /* with rerank: fetch this many instead of k * rerank (0: k * rerank; never fewer than k) */
} sg_fidx_sp_t;

/**
 * Reads the index at `path`. `params` (may be NULL or "") is a FAISS ParameterSpace string such
 * as "nprobe=16" or "efSearch=128". The inverted lists of an IVF index are memory-mapped from the
 * file (FAISS's IO_FLAG_MMAP), not copied: start-up reads only the coarse quantizer, and several
 * processes serving one file share one page-cache copy. Returns 0, or -1 with a message naming
 * the file in `err`.
 */
int sg_fidx_open(const char *path, const char *params, sg_fidx_t *ix, char *err, size_t err_size);
void sg_fidx_close(sg_fidx_t *ix);
/**
 * Searches `n` query vectors (`n * dim` floats) for their `k` nearest entries. `dist` and
 * `labels` receive n * k values, best first; missing results have label -1. Returns 0 or -1.
 */
int sg_fidx_search(const sg_fidx_t *ix, size_t n, const float *queries, int k, float *dist, int64_t *labels, char *err,
                   size_t err_size);
/**
 * Searches with per-call parameters (`sp` may be NULL: the index's own). Thread-safe with other
 * searches. With sp->rerank > 0 the index returns k * rerank candidates that are re-scored
 * exactly (fp32 vectors of the rerank file, FAISS's own distance) and the best k kept.
 */
int sg_fidx_search_sp(const sg_fidx_t *ix, size_t n, const float *queries, int k, const sg_fidx_sp_t *sp, float *dist,
                      int64_t *labels, char *err, size_t err_size);
/**
 * Maps the FAISS Flat IP/L2 index at `path` as the source of exact vectors for re-ranking. It
 * must have the index's dimension and metric and at least its number of vectors. Returns 0 or -1.
 */
int sg_fidx_open_rerank(sg_fidx_t *ix, const char *path, char *err, size_t err_size);
/** "Flat", "IVF4096 (SQ codes, 776 B/vector, lists mapped)", "HNSW32 (SQ storage)", ... */
const char *sg_fidx_describe(const sg_fidx_t *ix, char *buf, size_t size);
/** Makes FAISS use BLAS for searches with at least `nq` queries (FAISS's default is 20). */
void sg_fidx_set_blas_threshold(int nq);
/** A short name of the metric: "inner_product", "l2" or "other". */
const char *sg_fidx_metric_name(const sg_fidx_t *ix);

/* ---- writing (the index builder and tests) ---- */

/** A new empty index from a FAISS factory string ("Flat", "HNSW32", "IVF64,PQ8"), metric SG_FIDX_*. */
int sg_fidx_create(const char *factory, int dim, int metric, void **index, char *err, size_t err_size);
int sg_fidx_train(void *index, size_t n, const float *x, char *err, size_t err_size);
int sg_fidx_add(void *index, size_t n, const float *x, char *err, size_t err_size);
int sg_fidx_write(void *index, const char *path, char *err, size_t err_size);
void sg_fidx_free(void *index);

#endif
