/*
 * gpuhost.c -- host-side pieces of the GPU path (see gpuhost.h): the FAISS Flat file reader, the
 * shard and memory plans, the merge of per-shard results, exact re-scoring, fp16 conversion.
 * Plain C so that all of it is unit-tested on machines without a GPU (tests/gpu/test_gpuhost.c).
 */
#include "gpuhost.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- fp16 ---- */

uint16_t sg_gpu_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof(x));
    uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* infinity, or NaN (kept quiet, top payload bits kept) */
        return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0u));
    if (ax >= 0x477ff000u) /* 65520 and up round to infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) {   /* below 2^-14: a subnormal half, or zero */
        if (ax < 0x33000000u) /* below 2^-25 (half of the smallest subnormal): zero */
            return (uint16_t)sign;
        uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e; /* 14 .. 24: the value in units of 2^-24 is m >> shift */
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (r & 1u)))
            ++r; /* may carry into the smallest normal, which is the right encoding */
        return (uint16_t)(sign | r);
    }
    uint32_t r = ((((ax >> 23) - 127u + 15u) << 10) | ((ax & 0x7fffffu) >> 13)), rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u)))
        ++r; /* may carry into the exponent, up to infinity: right as well */
    return (uint16_t)(sign | r);
}

float sg_gpu_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, bits;
    if (e == 0) {
        float v = ldexpf((float)m, -24); /* zero or subnormal: exact */
        return sign ? -v : v;
    }
    if (e == 31)
        bits = sign | 0x7f800000u | (m << 13);
    else
        bits = sign | ((e - 15u + 127u) << 23) | (m << 13);
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

void sg_gpu_f32_to_f16_n(const float *src, uint16_t *dst, size_t n)
{
    for (size_t i = 0; i < n; ++i)
        dst[i] = sg_gpu_f32_to_f16(src[i]);
}

/* ---- the FAISS IndexFlat file ---- */

static void printable(const unsigned char *b, size_t got, char out[5])
{
    size_t n = got < 4 ? got : 4;
    for (size_t i = 0; i < n; ++i)
        out[i] = b[i] >= 0x20 && b[i] <= 0x7e ? (char)b[i] : '?';
    out[n] = '\0';
}

int sg_gpu_flat_is_flat(const char *path, char fourcc[5], char *err, size_t err_size)
{
    fourcc[0] = '\0';
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, err_size, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    unsigned char b[4];
    ssize_t got = pread(fd, b, sizeof(b), 0);
    close(fd);
    if (got < 0) {
        snprintf(err, err_size, "%s: cannot read: %s", path, strerror(errno));
        return -1;
    }
    printable(b, (size_t)got, fourcc);
    return got == 4 && (memcmp(b, "IxFI", 4) == 0 || memcmp(b, "IxF2", 4) == 0 || memcmp(b, "IxFl", 4) == 0);
}

int sg_gpu_flat_open(const char *path, sg_gpu_flatfile_t *ff, char *err, size_t err_size)
{
    memset(ff, 0, sizeof(*ff));
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, err_size, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    unsigned char h[64];
    ssize_t got;
    if (fstat(fd, &st) != 0 || (got = pread(fd, h, sizeof(h), 0)) < 0) {
        snprintf(err, err_size, "%s: cannot read: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    ff->file_size = (uint64_t)st.st_size;
    printable(h, (size_t)got, ff->fourcc);
    if (got < 4 || (memcmp(h, "IxFI", 4) != 0 && memcmp(h, "IxF2", 4) != 0 && memcmp(h, "IxFl", 4) != 0)) {
        snprintf(err, err_size, "%s: not a FAISS IndexFlat file (type \"%s\"); only flat indexes are searched on the GPU", path,
                 ff->fourcc);
        close(fd);
        return -1;
    }
    /* fourcc, int32 d, int64 ntotal, int64 dummy x2, bool is_trained, int32 metric_type,
     * [float metric_arg when metric_type > 1], uint64 n_floats, float data[n_floats] */
    if (got < 45) {
        snprintf(err, err_size, "%s: truncated FAISS IndexFlat file (%llu bytes)", path, (unsigned long long)ff->file_size);
        close(fd);
        return -1;
    }
    int32_t d, metric;
    int64_t ntotal, dummy1, dummy2;
    uint64_t nfloats;
    memcpy(&d, h + 4, 4);
    memcpy(&ntotal, h + 8, 8);
    memcpy(&dummy1, h + 16, 8);
    memcpy(&dummy2, h + 24, 8);
    memcpy(&metric, h + 33, 4);
    size_t pos = metric > 1 ? 41 : 37;
    if ((size_t)got < pos + 8) {
        snprintf(err, err_size, "%s: truncated FAISS IndexFlat file (%llu bytes)", path, (unsigned long long)ff->file_size);
        close(fd);
        return -1;
    }
    memcpy(&nfloats, h + pos, 8);
    if (d <= 0 || d > (1 << 20) || ntotal < 0 || ntotal > ((int64_t)1 << 40) || dummy1 != ((int64_t)1 << 20) ||
        dummy2 != ((int64_t)1 << 20) || h[32] > 1 || nfloats != (uint64_t)ntotal * (uint64_t)d) {
        snprintf(err, err_size, "%s: corrupt FAISS IndexFlat header (dimension %d, %lld vectors, %llu floats)", path, (int)d,
                 (long long)ntotal, (unsigned long long)nfloats);
        close(fd);
        return -1;
    }
    if (metric != 0 && metric != 1) {
        snprintf(err, err_size, "%s: FAISS metric type %d; only inner product (0) and L2 (1) flat indexes are searched on the GPU",
                 path, (int)metric);
        close(fd);
        return -1;
    }
    if ((memcmp(h, "IxFI", 4) == 0 && metric != 0) || (memcmp(h, "IxF2", 4) == 0 && metric != 1)) {
        snprintf(err, err_size, "%s: corrupt FAISS IndexFlat header (type %s with metric type %d)", path, ff->fourcc, (int)metric);
        close(fd);
        return -1;
    }
    uint64_t want = pos + 8 + nfloats * 4;
    if (ff->file_size != want) {
        snprintf(err, err_size,
                 "%s: the FAISS IndexFlat header describes %lld vectors of dimension %d (%llu bytes) but the file has %llu bytes "
                 "(truncated or corrupt)",
                 path, (long long)ntotal, (int)d, (unsigned long long)want, (unsigned long long)ff->file_size);
        close(fd);
        return -1;
    }
    ff->dim = d;
    ff->ntotal = ntotal;
    ff->metric = metric == 0 ? SG_GPU_IP : SG_GPU_L2;
    ff->data_offset = pos + 8;
    ff->map_len = (size_t)ff->file_size;
    void *map = mmap(NULL, ff->map_len, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        snprintf(err, err_size, "%s: cannot map %llu bytes: %s", path, (unsigned long long)ff->file_size, strerror(errno));
        memset(ff, 0, sizeof(*ff));
        return -1;
    }
    ff->map = map;
    return 0;
}

const unsigned char *sg_gpu_flat_row_bytes(const sg_gpu_flatfile_t *ff, int64_t row)
{
    return ff->map + ff->data_offset + (uint64_t)row * (uint64_t)ff->dim * 4u;
}

void sg_gpu_flat_rows(const sg_gpu_flatfile_t *ff, int64_t row0, int64_t n, float *dst)
{
    if (n > 0)
        memcpy(dst, sg_gpu_flat_row_bytes(ff, row0), (size_t)n * (size_t)ff->dim * sizeof(float));
}

void sg_gpu_flat_advise(const sg_gpu_flatfile_t *ff, int sequential)
{
    if (ff->map != NULL)
        (void)madvise((void *)ff->map, ff->map_len, sequential ? MADV_SEQUENTIAL : MADV_RANDOM);
}

void sg_gpu_flat_close(sg_gpu_flatfile_t *ff)
{
    if (ff->map != NULL)
        munmap((void *)ff->map, ff->map_len);
    memset(ff, 0, sizeof(*ff));
}

/* ---- shards ---- */

int sg_gpu_plan_shards(int64_t rows, int n, int64_t *start, int64_t *count)
{
    if (n < 1 || rows < 0)
        return -1;
    int64_t base = rows / n, extra = rows % n, at = 0;
    for (int i = 0; i < n; ++i) {
        start[i] = at;
        count[i] = base + (i < extra ? 1 : 0);
        at += count[i];
    }
    return 0;
}

/* ---- memory plans ---- */

static int64_t ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

int64_t sg_gpu_select_blocks(int64_t n)
{
    return ceil_div(n, SG_GPU_SELECT_CHUNK);
}

void sg_gpu_flat_layout(const sg_gpu_flat_plan_t *p, uint32_t nq, uint32_t k, sg_gpu_flat_layout_t *out)
{
    /* fewer queries than planned use longer tiles in the same score buffer */
    int64_t tile = p->score_entries / (int64_t)nq;
    if (tile < p->tile)
        tile = p->tile;
    if (tile > p->rows)
        tile = p->rows;
    out->tile = tile;
    out->n_tiles = ceil_div(p->rows, tile);
    out->chunks_full = sg_gpu_select_blocks(tile);
    out->chunks_last = sg_gpu_select_blocks(p->rows - (out->n_tiles - 1) * tile);
    out->level1 = ((out->n_tiles - 1) * out->chunks_full + out->chunks_last) * (int64_t)k;
}

int sg_gpu_flat_plan(sg_gpu_flat_plan_t *p, char *err, size_t err_size)
{
    if (p->rows < 1 || p->rows > INT32_MAX) {
        snprintf(err, err_size, "a GPU shard must hold 1 to %d vectors, not %lld", INT32_MAX, (long long)p->rows);
        return -1;
    }
    if (p->dim < 1 || p->dim > 65536) {
        snprintf(err, err_size, "dimension %d outside 1 .. 65536", p->dim);
        return -1;
    }
    if (p->max_k < 1 || p->max_k > SG_GPU_MAX_K) {
        snprintf(err, err_size, "k %u outside 1 .. %d", p->max_k, SG_GPU_MAX_K);
        return -1;
    }
    if (p->max_queries < 1 || p->max_queries > SG_GPU_MAX_QUERIES) {
        snprintf(err, err_size, "queries per search %u outside 1 .. %d", p->max_queries, SG_GPU_MAX_QUERIES);
        return -1;
    }
    const int64_t d = p->dim, q = p->max_queries;
    int64_t tile = (int64_t)(p->score_budget / ((uint64_t)q * sizeof(float)));
    if (tile < 1)
        tile = 1;
    if (tile > p->rows)
        tile = p->rows;
    p->tile = tile;
    p->score_entries = q * tile;
    /* the largest level-1 candidate set over every call size; later levels only shrink it
     * (SG_GPU_SELECT_CHUNK >= 2 * SG_GPU_MAX_K) */
    int64_t cand = 0;
    for (uint32_t nq = 1; nq <= p->max_queries; ++nq) {
        sg_gpu_flat_layout_t l;
        sg_gpu_flat_layout(p, nq, p->max_k, &l);
        if ((int64_t)nq * l.level1 > cand)
            cand = (int64_t)nq * l.level1;
    }
    p->cand_entries = cand;
    p->stage_rows = (int64_t)(SG_GPU_STAGE_BYTES / ((uint64_t)d * sizeof(float)));
    if (p->stage_rows < 1)
        p->stage_rows = 1;
    if (p->stage_rows > p->rows)
        p->stage_rows = p->rows;
    p->vec_bytes = (uint64_t)p->rows * (uint64_t)d * 2u;
    p->norm_bytes = p->metric == SG_GPU_L2 ? (uint64_t)p->rows * sizeof(float) : 0;
    p->score_bytes = (uint64_t)p->score_entries * sizeof(float);
    p->query_bytes = (uint64_t)q * (uint64_t)d * (sizeof(float) + 2u);
    p->cand_bytes = 2u * (uint64_t)cand * (sizeof(float) + sizeof(int32_t));
    p->out_bytes = (uint64_t)q * p->max_k * (sizeof(float) + sizeof(int32_t));
    p->stage_bytes = (uint64_t)p->stage_rows * (uint64_t)d * sizeof(float);
    p->total_bytes = p->vec_bytes + p->norm_bytes + p->score_bytes + p->query_bytes + p->cand_bytes + p->out_bytes + p->stage_bytes;
    p->pinned_bytes = 2u * p->stage_bytes + (uint64_t)q * (uint64_t)d * sizeof(float) + p->out_bytes;
    return 0;
}

int sg_gpu_enc_plan(sg_gpu_enc_plan_t *p, char *err, size_t err_size)
{
    const sg_gpu_enc_shape_t *s = &p->shape;
    if (s->hidden < 1 || s->hidden > 8192 || s->heads < 1 || s->hidden % s->heads != 0 || s->layers < 0 || s->intermediate < 1 ||
        s->vocab < 1 || s->max_positions < 2) {
        snprintf(err, err_size,
                 "unsupported model shape for the GPU encoder (hidden %d, heads %d, layers %d, intermediate %d): hidden must be "
                 "1 .. 8192 and a multiple of the heads",
                 s->hidden, s->heads, s->layers, s->intermediate);
        return -1;
    }
    if (p->max_len < 1 || p->max_len > (uint32_t)s->max_positions) {
        snprintf(err, err_size, "max length %u outside 1 .. %d (max_position_embeddings)", p->max_len, s->max_positions);
        return -1;
    }
    if (p->max_tokens < p->max_len || p->max_tokens > (1u << 24)) {
        snprintf(err, err_size, "tokens per pass %u outside %u (the max length) .. %u", p->max_tokens, p->max_len, 1u << 24);
        return -1;
    }
    if (p->max_seqs < 1 || p->max_seqs > 65535) {
        snprintf(err, err_size, "sequences per pass %u outside 1 .. 65535", p->max_seqs);
        return -1;
    }
    const uint64_t h = (uint64_t)s->hidden, in = (uint64_t)s->intermediate, P = p->max_tokens, S = p->max_seqs;
    const uint64_t L = p->max_len, H = (uint64_t)s->heads, w = 3 * h > in ? 3 * h : in;
    const uint64_t f16 = 2, f32 = 4;
    uint64_t per_layer = (3 * h * h + h * h + in * h + h * in) * f16 + (3 * h + h + in + h) * f32 + 4 * h * f32;
    p->weight_bytes =
        ((uint64_t)s->vocab + (uint64_t)s->max_positions) * h * f16 + h * f32 + 2 * h * f32 + (uint64_t)s->layers * per_layer;
    p->ws_bytes = P * 4 + S * 4             /* ids, lens */
                  + P * h * (f32 + f16)     /* x32, xh */
                  + P * w * f32             /* GEMM outputs */
                  + P * 3 * h * f16         /* q, k, v */
                  + H * P * L * (f32 + f16) /* attention scores and probabilities */
                  + P * h * f16             /* attention context */
                  + P * h * (f32 + f16)     /* after the attention block */
                  + P * in * f16            /* GELU output */
                  + S * h * f32;            /* pooled */
    p->pinned_bytes = P * 4 + S * 4 + S * h * f32;
    return 0;
}

size_t sg_gpu_enc_pass(const uint32_t *lens, size_t n, size_t first, uint32_t max_seqs, uint32_t max_tokens, uint32_t *longest)
{
    size_t j = first;
    uint32_t mx = 0;
    while (j < n && j - first < max_seqs) {
        uint32_t m2 = lens[j] > mx ? lens[j] : mx;
        if (j > first && (uint64_t)(j - first + 1) * m2 > max_tokens)
            break;
        mx = m2;
        ++j;
    }
    *longest = mx;
    return j - first;
}

uint64_t sg_gpu_usable(uint64_t free_bytes)
{
    uint64_t reserve = ((uint64_t)384 << 20) + free_bytes / 50;
    return free_bytes > reserve ? free_bytes - reserve : 0;
}

const char *sg_gpu_fmt_bytes(uint64_t bytes, char *buf, size_t size)
{
    if (bytes >= ((uint64_t)1 << 30))
        snprintf(buf, size, "%.2f GiB", (double)bytes / (double)((uint64_t)1 << 30));
    else
        snprintf(buf, size, "%.1f MiB", (double)bytes / (double)(1u << 20));
    return buf;
}

/* ---- results ---- */

void sg_gpu_merge(size_t n_shards, const float *const *keys, const int32_t *const *labels, const int64_t *base, size_t nq, int k,
                  float *out_keys, int64_t *out_labels)
{
    size_t *at = calloc(n_shards + 1, sizeof(*at));
    if (at == NULL)
        abort();
    for (size_t q = 0; q < nq; ++q) {
        for (size_t s = 0; s < n_shards; ++s)
            at[s] = 0;
        for (int i = 0; i < k; ++i) {
            size_t best = n_shards;
            float bk = 0;
            int64_t bl = 0;
            for (size_t s = 0; s < n_shards; ++s) {
                if (at[s] >= (size_t)k)
                    continue;
                size_t o = q * (size_t)k + at[s];
                if (labels[s][o] < 0)
                    continue;
                float kk = keys[s][o];
                int64_t ll = base[s] + labels[s][o];
                if (best == n_shards || kk > bk || (kk == bk && ll < bl)) {
                    best = s;
                    bk = kk;
                    bl = ll;
                }
            }
            size_t o = q * (size_t)k + (size_t)i;
            if (best == n_shards) {
                out_keys[o] = -INFINITY;
                out_labels[o] = -1;
            } else {
                out_keys[o] = bk;
                out_labels[o] = bl;
                ++at[best];
            }
        }
    }
    free(at);
}

static double sqnorm(const float *x, int d)
{
    double s = 0;
    for (int i = 0; i < d; ++i)
        s += (double)x[i] * x[i];
    return s;
}

void sg_gpu_keys_to_dist(int metric, const float *queries, int dim, size_t nq, int k, const float *keys, const int64_t *labels,
                         float *dist)
{
    for (size_t q = 0; q < nq; ++q) {
        double qn = metric == SG_GPU_L2 ? sqnorm(queries + q * (size_t)dim, dim) : 0;
        for (int i = 0; i < k; ++i) {
            size_t o = q * (size_t)k + (size_t)i;
            if (labels[o] < 0)
                dist[o] = metric == SG_GPU_L2 ? FLT_MAX : -FLT_MAX;
            else
                dist[o] = metric == SG_GPU_L2 ? (float)(qn - (double)keys[o]) : keys[o];
        }
    }
}

typedef struct st_scored_t {
    double d;
    int64_t label;
} scored_t;

static int cmp_ip(const void *a, const void *b)
{
    const scored_t *x = a, *y = b;
    if (x->d != y->d)
        return x->d > y->d ? -1 : 1;
    return x->label < y->label ? -1 : x->label > y->label;
}

static int cmp_l2(const void *a, const void *b)
{
    const scored_t *x = a, *y = b;
    if (x->d != y->d)
        return x->d < y->d ? -1 : 1;
    return x->label < y->label ? -1 : x->label > y->label;
}

void sg_gpu_rescore(const sg_gpu_flatfile_t *ff, const float *queries, size_t nq, const int64_t *cand, int kc, int k, float *dist,
                    int64_t *labels, float *row)
{
    const int d = ff->dim;
    scored_t *sc = malloc(((size_t)kc + 1) * sizeof(*sc));
    if (sc == NULL)
        abort();
    for (size_t q = 0; q < nq; ++q) {
        const float *qv = queries + q * (size_t)d;
        size_t n = 0;
        for (int i = 0; i < kc; ++i) {
            int64_t l = cand[q * (size_t)kc + (size_t)i];
            if (l < 0 || l >= ff->ntotal)
                continue;
            sg_gpu_flat_rows(ff, l, 1, row);
            double s = 0;
            if (ff->metric == SG_GPU_L2) {
                for (int j = 0; j < d; ++j) {
                    double t = (double)qv[j] - row[j];
                    s += t * t;
                }
            } else {
                for (int j = 0; j < d; ++j)
                    s += (double)qv[j] * row[j];
            }
            sc[n].d = s;
            sc[n].label = l;
            ++n;
        }
        qsort(sc, n, sizeof(*sc), ff->metric == SG_GPU_L2 ? cmp_l2 : cmp_ip);
        for (int i = 0; i < k; ++i) {
            size_t o = q * (size_t)k + (size_t)i;
            if ((size_t)i < n) {
                dist[o] = (float)sc[i].d;
                labels[o] = sc[i].label;
            } else {
                dist[o] = ff->metric == SG_GPU_L2 ? FLT_MAX : -FLT_MAX;
                labels[o] = -1;
            }
        }
    }
    free(sc);
}

/* splitmix64, as in flat.cu */
static uint64_t splitmix(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void sg_gpu_random_rows(uint64_t seed, int64_t first, int64_t n, int d, float *x)
{
    for (int64_t r = 0; r < n; ++r) {
        float s = 0;
        for (int j = 0; j < d; ++j) {
            uint64_t i = (uint64_t)(first + r) * (uint64_t)d + (uint64_t)j;
            float u = (float)(splitmix(seed ^ splitmix(i)) >> 40) * (2.0f / 16777216.0f) - 1.0f;
            x[r * d + j] = u;
            s += u * u;
        }
        float inv = 1.0f / fmaxf(sqrtf(s), 1e-12f);
        for (int j = 0; j < d; ++j)
            x[r * d + j] *= inv;
    }
}
