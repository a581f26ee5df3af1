/*
 * faissidx.c -- the FAISS C API glue of the local backend. Error messages come from
 * faiss_get_last_error() (thread-local in the C API) and always name the file involved.
 */
#include "faissidx.h"
#include "e5_internal.h"

#include <faiss/c_api/AutoTune_c.h>
#include <faiss/c_api/Index_c.h>
#include <faiss/c_api/error_c.h>
#include <faiss/c_api/index_factory_c.h>
#include <faiss/c_api/index_io_c.h>
#include <faiss/c_api/utils/distances_c.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void faiss_err(char *err, size_t err_size, const char *what, const char *path)
{
    const char *m = faiss_get_last_error();
    /* FAISS messages are multi-line ("Error in ... at file:line: reason"); keep the reason */
    const char *r = m != NULL ? strstr(m, ": ") : NULL;
    const char *msg = m == NULL ? "unknown FAISS error" : (r != NULL && strstr(m, "Error in") == m ? r + 2 : m);
    snprintf(err, err_size, "%s%s%s: %s", path != NULL ? path : "", path != NULL ? ": " : "", what, msg);
    /* one line */
    for (char *p = err; *p != '\0'; ++p)
        if (*p == '\n')
            *p = ' ';
}

/* FAISS 1.7.3's readers resize their vectors to the size the file claims before reading it and
 * leak the half-built index when a read fails, so a Flat index (the Search-R1 case) is checked
 * here first: header fields, and the file size they imply (layout: docs/protocols.md, "Corpus and index files"). */
static int check_flat(const char *path, const unsigned char *h, size_t got, uint64_t size, char *err, size_t err_size)
{
    if (got < 45) {
        snprintf(err, err_size, "%s: truncated FAISS Flat index (%llu bytes)", path, (unsigned long long)size);
        return -1;
    }
    int32_t d, metric;
    int64_t ntotal;
    uint64_t nfloats;
    memcpy(&d, h + 4, 4);
    memcpy(&ntotal, h + 8, 8);
    memcpy(&metric, h + 33, 4);
    size_t pos = metric > 1 ? 41 : 37;
    if (got < pos + 8) {
        snprintf(err, err_size, "%s: truncated FAISS Flat index (%llu bytes)", path, (unsigned long long)size);
        return -1;
    }
    memcpy(&nfloats, h + pos, 8);
    if (d <= 0 || d > (1 << 20) || ntotal < 0 || ntotal > ((int64_t)1 << 40) || nfloats != (uint64_t)ntotal * (uint64_t)d) {
        snprintf(err, err_size, "%s: corrupt FAISS Flat index header (dimension %d, %lld vectors, %llu floats)", path, (int)d,
                 (long long)ntotal, (unsigned long long)nfloats);
        return -1;
    }
    uint64_t want = pos + 8 + nfloats * 4;
    if (size != want) {
        snprintf(err, err_size,
                 "%s: the FAISS Flat index header describes %lld vectors of dimension %d (%llu bytes) but the file has %llu "
                 "bytes (truncated or corrupt)",
                 path, (long long)ntotal, (int)d, (unsigned long long)want, (unsigned long long)size);
        return -1;
    }
    return 0;
}

int sg_fidx_open(const char *path, const char *params, sg_fidx_t *ix, char *err, size_t err_size)
{
    memset(ix, 0, sizeof(*ix));
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) {
        snprintf(err, err_size, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    unsigned char head[64];
    size_t got = fread(head, 1, sizeof(head), fp);
    fclose(fp);
    memcpy(ix->fourcc, head, got < 4 ? got : 4);
    ix->fourcc[got < 4 ? got : 4] = '\0';
    for (size_t i = 0; i < 4 && ix->fourcc[i] != '\0'; ++i)
        if (ix->fourcc[i] < 0x20 || ix->fourcc[i] > 0x7e)
            ix->fourcc[i] = '?';
    if (sg__e5_fingerprint(path, &ix->file_size, &ix->file_hash, err, err_size) != 0)
        return -1;
    if (got >= 4 && (memcmp(head, "IxFI", 4) == 0 || memcmp(head, "IxF2", 4) == 0 || memcmp(head, "IxFl", 4) == 0) &&
        check_flat(path, head, got, ix->file_size, err, err_size) != 0)
        return -1;
    int is_flat = got >= 4 && (memcmp(head, "IxFI", 4) == 0 || memcmp(head, "IxF2", 4) == 0 || memcmp(head, "IxFl", 4) == 0);
    FaissIndex *index = NULL;
    /* IVF lists are mapped, not copied (the flag is ignored by every other index type) */
    if (faiss_read_index_fname(path, is_flat ? 0 : sg_fext_io_flag_mmap(), &index) != 0 || index == NULL) {
        faiss_err(err, err_size, "not a readable FAISS index", path);
        return -1;
    }
    sg_fext_info(index, &ix->info);
    if (ix->info.lists_mapped < 0) { /* FAISS on-disk lists: read them the normal way (they map their own file) */
        faiss_Index_free(index);
        index = NULL;
        if (faiss_read_index_fname(path, 0, &index) != 0 || index == NULL) {
            faiss_err(err, err_size, "not a readable FAISS index", path);
            return -1;
        }
        sg_fext_info(index, &ix->info);
    }
    if (ix->info.lists_mapped > 0)
        ix->prefetch_off = sg_fext_disable_prefetch(index);
    ix->index = index;
    ix->dim = (int)faiss_Index_d(index);
    ix->ntotal = (int64_t)faiss_Index_ntotal(index);
    FaissMetricType mt = faiss_Index_metric_type(index);
    ix->metric = mt == METRIC_INNER_PRODUCT ? SG_FIDX_IP : mt == METRIC_L2 ? SG_FIDX_L2 : SG_FIDX_OTHER;
    if (params != NULL && params[0] != '\0') {
        FaissParameterSpace *ps = NULL;
        if (faiss_ParameterSpace_new(&ps) != 0 || faiss_ParameterSpace_set_index_parameters(ps, index, params) != 0) {
            faiss_err(err, err_size, "cannot apply search parameters", path);
            faiss_ParameterSpace_free(ps);
            sg_fidx_close(ix);
            return -1;
        }
        faiss_ParameterSpace_free(ps);
        sg_fext_info(index, &ix->info); /* nprobe / efSearch may have changed */
    }
    return 0;
}

void sg_fidx_close(sg_fidx_t *ix)
{
    if (ix->index != NULL)
        faiss_Index_free(ix->index);
    sg_gpu_flat_close(&ix->rerank);
    memset(ix, 0, sizeof(*ix));
}

int sg_fidx_open_rerank(sg_fidx_t *ix, const char *path, char *err, size_t err_size)
{
    char fourcc[5];
    int r = sg_gpu_flat_is_flat(path, fourcc, err, err_size);
    if (r < 0)
        return -1;
    if (r == 0) {
        snprintf(err, err_size,
                 "%s: not a FAISS Flat index (type \"%s\"); re-ranking reads exact vectors from an IndexFlatIP/L2 file", path,
                 fourcc);
        return -1;
    }
    sg_gpu_flatfile_t ff;
    if (sg_gpu_flat_open(path, &ff, err, err_size) != 0)
        return -1;
    if (ff.dim != ix->dim || (ff.metric == SG_GPU_IP) != (ix->metric == SG_FIDX_IP) || ff.ntotal < ix->ntotal) {
        snprintf(err, err_size,
                 "%s: %lld vectors of dimension %d, metric %s, cannot re-rank an index of %lld vectors of dimension %d, metric %s",
                 path, (long long)ff.ntotal, ff.dim, ff.metric == SG_GPU_IP ? "inner_product" : "l2", (long long)ix->ntotal,
                 ix->dim, sg_fidx_metric_name(ix));
        sg_gpu_flat_close(&ff);
        return -1;
    }
    sg_gpu_flat_advise(&ff, 0); /* candidates are random rows: no read-ahead */
    sg_gpu_flat_close(&ix->rerank);
    ix->rerank = ff;
    return 0;
}

int sg_fidx_search_sp(const sg_fidx_t *ix, size_t n, const float *queries, int k, const sg_fidx_sp_t *sp, float *dist,
                      int64_t *labels, char *err, size_t err_size)
{
    int nprobe = sp != NULL ? sp->nprobe : 0, ef = sp != NULL ? sp->ef_search : 0;
    int rerank = sp != NULL && ix->rerank.map != NULL ? sp->rerank : 0;
    if (rerank <= 0)
        return sg_fext_search(ix->index, (int64_t)n, queries, k, dist, labels, nprobe, ef, err, err_size);
    int kc = sp->candidates > 0 ? (sp->candidates > k ? sp->candidates : k) : k * rerank;
    float *cd = malloc(n * (size_t)kc * sizeof(float) + (size_t)ix->dim * sizeof(float));
    int64_t *cl = malloc(n * (size_t)kc * sizeof(int64_t));
    if (cd == NULL || cl == NULL) {
        free(cd);
        free(cl);
        snprintf(err, err_size, "out of memory for %zu x %d re-ranking candidates", n, kc);
        return -1;
    }
    int rc = sg_fext_search(ix->index, (int64_t)n, queries, kc, cd, cl, nprobe, ef, err, err_size);
    if (rc == 0)
        sg_gpu_rescore(&ix->rerank, queries, n, cl, kc, k, dist, labels, cd + n * (size_t)kc);
    free(cd);
    free(cl);
    return rc;
}

const char *sg_fidx_describe(const sg_fidx_t *ix, char *buf, size_t size)
{
    const sg_fext_info_t *i = &ix->info;
    switch (i->kind) {
    case SG_FEXT_FLAT:
        snprintf(buf, size, "Flat (%zu B/vector, in memory)", i->code_size);
        break;
    case SG_FEXT_IVF:
        snprintf(buf, size, "IVF%lld (%s codes, %zu B/vector + 8 B id; lists %s)", (long long)i->nlist, i->storage, i->code_size,
                 i->lists_mapped ? "memory-mapped from the file" : "in memory");
        break;
    case SG_FEXT_HNSW:
        snprintf(buf, size, "HNSW%d (%s storage, %zu B/vector, in memory)", i->hnsw_m, i->storage, i->code_size);
        break;
    default:
        snprintf(buf, size, "%s (in memory)", ix->fourcc);
        break;
    }
    return buf;
}

int sg_fidx_search(const sg_fidx_t *ix, size_t n, const float *queries, int k, float *dist, int64_t *labels, char *err,
                   size_t err_size)
{
    if (faiss_Index_search(ix->index, (idx_t)n, queries, (idx_t)k, dist, (idx_t *)labels) != 0) {
        faiss_err(err, err_size, "search failed", NULL);
        return -1;
    }
    return 0;
}

void sg_fidx_set_blas_threshold(int nq)
{
    faiss_set_distance_compute_blas_threshold(nq);
}

const char *sg_fidx_metric_name(const sg_fidx_t *ix)
{
    return ix->metric == SG_FIDX_IP ? "inner_product" : ix->metric == SG_FIDX_L2 ? "l2" : "other";
}

int sg_fidx_create(const char *factory, int dim, int metric, void **index, char *err, size_t err_size)
{
    FaissIndex *p = NULL;
    if (faiss_index_factory(&p, dim, factory, metric == SG_FIDX_L2 ? METRIC_L2 : METRIC_INNER_PRODUCT) != 0) {
        faiss_err(err, err_size, "cannot create index", factory);
        return -1;
    }
    *index = p;
    return 0;
}

int sg_fidx_train(void *index, size_t n, const float *x, char *err, size_t err_size)
{
    if (faiss_Index_is_trained(index))
        return 0;
    if (faiss_Index_train(index, (idx_t)n, x) != 0) {
        faiss_err(err, err_size, "training failed", NULL);
        return -1;
    }
    return 0;
}

int sg_fidx_add(void *index, size_t n, const float *x, char *err, size_t err_size)
{
    if (faiss_Index_add(index, (idx_t)n, x) != 0) {
        faiss_err(err, err_size, "add failed", NULL);
        return -1;
    }
    return 0;
}

int sg_fidx_write(void *index, const char *path, char *err, size_t err_size)
{
    if (faiss_write_index_fname(index, path) != 0) {
        faiss_err(err, err_size, "cannot write index", path);
        return -1;
    }
    return 0;
}

void sg_fidx_free(void *index)
{
    if (index != NULL)
        faiss_Index_free(index);
}
