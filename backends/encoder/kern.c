/*
 * kern.c -- the encoder's own kernels (kern.h): packed float32 and int8 matrix products with their
 * epilogues, int8 quantisation of activations, GELU and fused attention.
 *
 * Why our own products: the BLAS the encoder used (OpenBLAS or oneDNN's sgemm) packs both operands
 * on every call. In a team, each thread's slice of a product re-packed its part of the weights,
 * and at one query's ten tokens packing costs as much as multiplying. Here the weights are packed
 * once at load, so a product is a loop over tiles that read the packed panels in place and the
 * input rows where they are (a broadcast per row and k): any thread can take any tile, and the
 * bias and GELU are applied to the accumulators before they leave the registers.
 *
 * Tiles: float32 AVX-512 6 rows x 4 panels (24 zmm accumulators), AVX2 6 rows x 1 panel (12 ymm);
 * int8 VNNI 6 rows x 4 panels, AVX2 3 rows x 1 panel. Every output is one chain of fused
 * multiply-adds (float32) or one exact int32 sum (int8) over k in order, so tiles, kernels of the
 * same family and team splits agree bit for bit (float32: up to the kernel family; int8: every
 * kernel gives the same integers).
 *
 * The SIMD code is compiled with per-function target attributes and chosen at run time
 * (sg_kern_*_best from the CPU's features), so the library still runs on any x86-64 CPU. The
 * vector erff/expf come from glibc's libmvec (2.35 and later), as the e5 GELU already did.
 */
#include "kern.h"
#include "blas.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
#define SG_KERN_SIMD 1
#include <immintrin.h>
#else
#define SG_KERN_SIMD 0
#endif

#define F32_MR 6      /* AVX-512 and AVX2 float32 tiles: rows */
#define F32_NP 4      /* AVX-512 float32 tiles: panels */
#define Q8_MR 6       /* VNNI tiles: rows */
#define Q8_NP 4       /* VNNI tiles: panels */
#define Q8A_MR 3      /* AVX2 int8 tiles: rows (16 ymm registers: 6 accumulators and 7 operands) */
#define Q8A7_MR 4     /* AVX2 int8 tiles of 7-bit weights: rows (no sign step: 8 accumulators fit) */
#define ROT_KEEP 4096 /* rotated rows up to this long are kept on the stack between finding the maximum and quantising */
#define ALIGN 64

const char *sg_kern_name(int kern)
{
    switch (kern) {
    case SG_KERN_SCALAR:
        return "scalar";
    case SG_KERN_AVX2:
        return "avx2";
    case SG_KERN_AVX512:
        return "avx512";
    case SG_KERN_VNNI:
        return "avx512-vnni";
    default:
        return "blas";
    }
}

#define F_AVX2 (SG_CPU_AVX | SG_CPU_AVX2 | SG_CPU_FMA)
#define F_AVX512 (SG_CPU_AVX512F | SG_CPU_AVX512BW | SG_CPU_AVX512DQ | SG_CPU_AVX512VL)

int sg_kern_runs(int kern, int int8, uint32_t f)
{
    switch (kern) {
    case SG_KERN_SCALAR:
        return 1;
    case SG_KERN_AVX2:
        return SG_KERN_SIMD && (f & F_AVX2) == F_AVX2;
    case SG_KERN_AVX512:
        return SG_KERN_SIMD && !int8 && (f & F_AVX2) == F_AVX2 && (f & F_AVX512) == F_AVX512;
    case SG_KERN_VNNI:
        return SG_KERN_SIMD && int8 && (f & F_AVX2) == F_AVX2 && (f & F_AVX512) == F_AVX512 && (f & SG_CPU_AVX512_VNNI);
    default:
        return 0;
    }
}

int sg_kern_f32_best(uint32_t features)
{
    if (sg_kern_runs(SG_KERN_AVX512, 0, features))
        return SG_KERN_AVX512;
    return sg_kern_runs(SG_KERN_AVX2, 0, features) ? SG_KERN_AVX2 : SG_KERN_NONE;
}

int sg_kern_q8_best(uint32_t features)
{
    if (sg_kern_runs(SG_KERN_VNNI, 1, features))
        return SG_KERN_VNNI;
    return sg_kern_runs(SG_KERN_AVX2, 1, features) ? SG_KERN_AVX2 : SG_KERN_SCALAR;
}

static void *aligned(size_t bytes)
{
    void *p = NULL;
    if (posix_memalign(&p, ALIGN, bytes > 0 ? (bytes + ALIGN - 1) / ALIGN * ALIGN : ALIGN) != 0)
        return NULL;
    return p;
}

/* ---- packing ---- */

/* Row j of the stacked matrices, and its bias (0 when none). */
static const float *stacked_row(int parts, const float *const *w, const float *const *b, const int *n, int k, int j, float *bias)
{
    for (int i = 0; i < parts; ++i) {
        if (j < n[i]) {
            *bias = b != NULL && b[i] != NULL ? b[i][j] : 0.0f;
            return w[i] + (size_t)j * (size_t)k;
        }
        j -= n[i];
    }
    return NULL;
}

int sg_kern_f32_pack(sg_kern_f32w_t *pw, int parts, const float *const *w, const float *const *b, const int *n, int k)
{
    memset(pw, 0, sizeof(*pw));
    int total = 0;
    for (int i = 0; i < parts; ++i)
        total += n[i];
    pw->n = total;
    pw->k = k;
    pw->np = (total + SG_KERN_PANEL - 1) / SG_KERN_PANEL;
    size_t cols = (size_t)pw->np * SG_KERN_PANEL;
    pw->w = aligned(cols * (size_t)k * sizeof(float));
    pw->b = aligned(cols * sizeof(float));
    if (pw->w == NULL || pw->b == NULL) {
        sg_kern_f32_free(pw);
        return -1;
    }
    memset(pw->w, 0, cols * (size_t)k * sizeof(float));
    memset(pw->b, 0, cols * sizeof(float));
    for (int j = 0; j < total; ++j) {
        const float *row = stacked_row(parts, w, b, n, k, j, &pw->b[j]);
        float *dst = pw->w + (size_t)(j / SG_KERN_PANEL) * (size_t)k * SG_KERN_PANEL + (size_t)(j % SG_KERN_PANEL);
        for (int kk = 0; kk < k; ++kk)
            dst[(size_t)kk * SG_KERN_PANEL] = row[kk];
    }
    return 0;
}

void sg_kern_f32_free(sg_kern_f32w_t *pw)
{
    free(pw->w);
    free(pw->b);
    memset(pw, 0, sizeof(*pw));
}

/* q = round(v * inv) to nearest even, within [-127, 127] */
static inline int quant(float v, float inv)
{
    long q = lrintf(v * inv);
    return q > 127 ? 127 : q < -127 ? -127 : (int)q;
}

/* ---- the int8 rotation (kern.h): v = H D v / 8 per block of SG_KERN_ROT ---- */

/* D: -1 where bit 0 of murmur3's finaliser of the position in the row is set */
static float rot_sign(int kk)
{
    uint32_t h = (uint32_t)kk;
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    return (h & 1) ? -1.0f : 1.0f;
}

/* H (Sylvester's order) on one block in place: stages h = 1, 2, 4 ... 32, each pair (j, j + h) with
 * bit h of j clear becoming (a + b, a - b); then / 8. The SIMD versions do the same operations on
 * the same operands, so every kernel gives the same bits. */
static void fwht_block(float *v)
{
    for (int h = 1; h < SG_KERN_ROT; h <<= 1) {
        for (int i = 0; i < SG_KERN_ROT; i += 2 * h) {
            for (int j = i; j < i + h; ++j) {
                float a = v[j], b = v[j + h];
                v[j] = a + b;
                v[j + h] = a - b;
            }
        }
    }
    for (int j = 0; j < SG_KERN_ROT; ++j)
        v[j] *= 0.125f;
}

/* block `blk` of row x as the product sees it: (x - mu) * D, rotated */
static void rot_block(const float *x, const float *mu, const float *sign, int blk, float *v)
{
    const int k0 = blk * SG_KERN_ROT;
    for (int j = 0; j < SG_KERN_ROT; ++j)
        v[j] = (mu != NULL ? x[k0 + j] - mu[k0 + j] : x[k0 + j]) * sign[k0 + j];
    fwht_block(v);
}

static size_t q8_offset(const sg_kern_q8w_t *qw, int j, int kk)
{
    return ((size_t)(j / SG_KERN_PANEL) * (size_t)(qw->kp / 4) + (size_t)(kk / 4)) * (SG_KERN_PANEL * 4) +
           (size_t)(j % SG_KERN_PANEL) * 4 + (size_t)(kk % 4);
}

int sg_kern_q8_pack(sg_kern_q8w_t *qw, int parts, const float *const *w, const float *const *b, const int *n, int k, int bits,
                    const float *mu, int rotate)
{
    memset(qw, 0, sizeof(*qw));
    const int levels = bits == 7 ? 63 : 127;
    qw->bits = bits == 7 ? 7 : 8;
    int total = 0;
    for (int i = 0; i < parts; ++i)
        total += n[i];
    qw->n = total;
    qw->k = k;
    qw->kp = (k + 3) / 4 * 4;
    qw->np = (total + SG_KERN_PANEL - 1) / SG_KERN_PANEL;
    size_t cols = (size_t)qw->np * SG_KERN_PANEL;
    qw->w = aligned(cols * (size_t)qw->kp);
    qw->scale = aligned(cols * sizeof(float));
    qw->comp = aligned(cols * sizeof(int32_t));
    qw->b = aligned(cols * sizeof(float));
    if (mu != NULL)
        qw->mu = aligned((size_t)qw->kp * sizeof(float));
    rotate = rotate && k % SG_KERN_ROT == 0;
    float *rw = NULL; /* one rotated weight row */
    if (rotate) {
        qw->sign = aligned((size_t)k * sizeof(float));
        rw = aligned((size_t)k * sizeof(float));
    }
    if (qw->w == NULL || qw->scale == NULL || qw->comp == NULL || qw->b == NULL || (mu != NULL && qw->mu == NULL) ||
        (rotate && (qw->sign == NULL || rw == NULL))) {
        free(rw);
        sg_kern_q8_free(qw);
        return -1;
    }
    for (int kk = 0; rotate && kk < k; ++kk)
        qw->sign[kk] = rot_sign(kk);
    memset(qw->w, 0, cols * (size_t)qw->kp);
    memset(qw->scale, 0, cols * sizeof(float));
    memset(qw->comp, 0, cols * sizeof(int32_t));
    memset(qw->b, 0, cols * sizeof(float));
    if (mu != NULL) {
        memset(qw->mu, 0, (size_t)qw->kp * sizeof(float));
        memcpy(qw->mu, mu, (size_t)k * sizeof(float));
    }
    for (int j = 0; j < total; ++j) {
        const float *row = stacked_row(parts, w, b, n, k, j, &qw->b[j]);
        double wmu = 0;
        for (int kk = 0; mu != NULL && kk < k; ++kk)
            wmu += (double)row[kk] * mu[kk];
        qw->b[j] = (float)(qw->b[j] + wmu); /* W mu through the float32 weights: only x - mu meets the quantised ones */
        if (rotate) { /* W D H / 8: the row rotated like an input row, so that (W D H / 8) (H D c / 8) = W c */
            for (int blk = 0; blk < k / SG_KERN_ROT; ++blk)
                rot_block(row, NULL, qw->sign, blk, rw + blk * SG_KERN_ROT);
            row = rw;
        }
        float mx = 0;
        for (int kk = 0; kk < k; ++kk)
            mx = fmaxf(mx, fabsf(row[kk]));
        float inv = mx > 0 ? (float)levels / mx : 0.0f;
        qw->scale[j] = mx / (float)levels;
        int32_t sum = 0;
        for (int kk = 0; kk < k; ++kk) {
            int q = quant(row[kk], inv);
            qw->w[q8_offset(qw, j, kk)] = (int8_t)q;
            sum += q;
        }
        qw->comp[j] = 128 * sum;
    }
    free(rw);
    return 0;
}

int sg_kern_q8_keep_rows(sg_kern_q8w_t *qw)
{
    if (qw->rows != NULL)
        return 0;
    qw->rows = aligned((size_t)qw->n * (size_t)qw->kp);
    if (qw->rows == NULL)
        return -1;
    for (int j = 0; j < qw->n; ++j)
        for (int kk = 0; kk < qw->kp; ++kk)
            qw->rows[(size_t)j * (size_t)qw->kp + (size_t)kk] = qw->w[q8_offset(qw, j, kk)];
    return 0;
}

void sg_kern_q8_free(sg_kern_q8w_t *qw)
{
    free(qw->w);
    free(qw->rows);
    free(qw->scale);
    free(qw->comp);
    free(qw->b);
    free(qw->mu);
    free(qw->sign);
    memset(qw, 0, sizeof(*qw));
}

int sg_kern_q8_weight(const sg_kern_q8w_t *qw, int j, int kk)
{
    return qw->w[q8_offset(qw, j, kk)];
}

int sg_kern_q8x_reserve(sg_kern_q8x_t *qx, size_t rows, int k)
{
    int kp = (k + 3) / 4 * 4;
    size_t bytes = rows * (size_t)kp;
    if (rows > qx->cap_rows || bytes > qx->cap_bytes) {
        size_t cap_rows = rows > qx->cap_rows ? rows : qx->cap_rows, cap_bytes = bytes > qx->cap_bytes ? bytes : qx->cap_bytes;
        sg_kern_q8x_free(qx);
        qx->u = aligned(cap_bytes);
        qx->s = aligned(cap_bytes);
        qx->scale = aligned(cap_rows * sizeof(float));
        if (qx->u == NULL || qx->s == NULL || qx->scale == NULL) {
            sg_kern_q8x_free(qx);
            return -1;
        }
        qx->cap_rows = cap_rows;
        qx->cap_bytes = cap_bytes;
    }
    qx->kp = kp;
    return 0;
}

void sg_kern_q8x_free(sg_kern_q8x_t *qx)
{
    free(qx->u);
    free(qx->s);
    free(qx->scale);
    memset(qx, 0, sizeof(*qx));
}

/* ---- scalar kernels (any CPU; the references of the SIMD ones) ---- */

static float gelu1(float v)
{
    return 0.5f * v * (1.0f + erff(v * (float)M_SQRT1_2));
}

static void f32_tile_scalar(const sg_kern_f32w_t *pw, const float *x, size_t ldx, size_t r0, size_t r1, int p0, int p1, float *y,
                            size_t ldy, int gelu)
{
    int j1 = p1 * SG_KERN_PANEL < pw->n ? p1 * SG_KERN_PANEL : pw->n;
    for (size_t r = r0; r < r1; ++r) {
        const float *xr = x + r * ldx;
        for (int j = p0 * SG_KERN_PANEL; j < j1; ++j) {
            const float *wp = pw->w + (size_t)(j / SG_KERN_PANEL) * (size_t)pw->k * SG_KERN_PANEL + (size_t)(j % SG_KERN_PANEL);
            float acc = 0;
            for (int kk = 0; kk < pw->k; ++kk)
                acc = fmaf(xr[kk], wp[(size_t)kk * SG_KERN_PANEL], acc);
            float v = acc + pw->b[j];
            y[r * ldy + (size_t)j] = gelu ? gelu1(v) : v;
        }
    }
}

static void q8_quantize_scalar(const float *x, size_t ldx, int k, const float *mu, size_t r0, size_t r1, sg_kern_q8x_t *qx)
{
    for (size_t r = r0; r < r1; ++r) {
        const float *xr = x + r * ldx;
        float mx = 0;
        for (int kk = 0; kk < k; ++kk)
            mx = fmaxf(mx, fabsf(mu != NULL ? xr[kk] - mu[kk] : xr[kk]));
        float inv = mx > 0 ? 127.0f / mx : 0.0f;
        qx->scale[r] = mx / 127.0f;
        int8_t *s = qx->s + r * (size_t)qx->kp;
        uint8_t *u = qx->u + r * (size_t)qx->kp;
        for (int kk = 0; kk < qx->kp; ++kk) {
            int q = kk < k ? quant(mu != NULL ? xr[kk] - mu[kk] : xr[kk], inv) : 0;
            s[kk] = (int8_t)q;
            u[kk] = (uint8_t)(q + 128);
        }
    }
}

/* rotated rows (k a multiple of SG_KERN_ROT): each block rotated twice, for the maximum and to quantise */
static void q8_row_prepare_scalar(const float *xr, int k, const float *mu, const float *sign, float *c);
static void q8_row_quant_scalar(const float *c, int k, sg_kern_q8x_t *qx, size_t r);

static void q8_quantize_rot_scalar(const float *x, size_t ldx, int k, const float *mu, const float *sign, size_t r0, size_t r1,
                                   sg_kern_q8x_t *qx)
{
    if (k <= ROT_KEEP) { /* the rotated row kept between its maximum and its quantisation: rotated once */
        float keep[ROT_KEEP];
        for (size_t r = r0; r < r1; ++r) {
            q8_row_prepare_scalar(x + r * ldx, k, mu, sign, keep);
            q8_row_quant_scalar(keep, k, qx, r);
        }
        return;
    }
    float v[SG_KERN_ROT];
    for (size_t r = r0; r < r1; ++r) { /* longer rows: rotated for the maximum, then again to quantise */
        const float *xr = x + r * ldx;
        float mx = 0;
        for (int blk = 0; blk < k / SG_KERN_ROT; ++blk) {
            rot_block(xr, mu, sign, blk, v);
            for (int j = 0; j < SG_KERN_ROT; ++j)
                mx = fmaxf(mx, fabsf(v[j]));
        }
        float inv = mx > 0 ? 127.0f / mx : 0.0f;
        qx->scale[r] = mx / 127.0f;
        int8_t *s = qx->s + r * (size_t)qx->kp;
        uint8_t *u = qx->u + r * (size_t)qx->kp;
        for (int blk = 0; blk < k / SG_KERN_ROT; ++blk) {
            rot_block(xr, mu, sign, blk, v);
            for (int j = 0; j < SG_KERN_ROT; ++j) {
                int q = quant(v[j], inv);
                s[blk * SG_KERN_ROT + j] = (int8_t)q;
                u[blk * SG_KERN_ROT + j] = (uint8_t)(q + 128);
            }
        }
    }
}

/* Two terms (kern.h): the row as the product takes it (centred, rotated) into c, quantised; then
 * the rest c - q1 s1 (one fused multiply-add) quantised again into the second term's row. */
static void q8_row_prepare_scalar(const float *xr, int k, const float *mu, const float *sign, float *c)
{
    if (sign != NULL) {
        for (int blk = 0; blk < k / SG_KERN_ROT; ++blk)
            rot_block(xr, mu, sign, blk, c + blk * SG_KERN_ROT);
        return;
    }
    for (int kk = 0; kk < k; ++kk)
        c[kk] = mu != NULL ? xr[kk] - mu[kk] : xr[kk];
}

static void q8_row_quant_scalar(const float *c, int k, sg_kern_q8x_t *qx, size_t r)
{
    float mx = 0;
    for (int kk = 0; kk < k; ++kk)
        mx = fmaxf(mx, fabsf(c[kk]));
    float inv = mx > 0 ? 127.0f / mx : 0.0f;
    qx->scale[r] = mx / 127.0f;
    int8_t *s = qx->s + r * (size_t)qx->kp;
    uint8_t *u = qx->u + r * (size_t)qx->kp;
    for (int kk = 0; kk < qx->kp; ++kk) {
        int q = kk < k ? quant(c[kk], inv) : 0;
        s[kk] = (int8_t)q;
        u[kk] = (uint8_t)(q + 128);
    }
}

static void q8_quantize2_scalar(const float *x, size_t ldx, int k, const float *mu, const float *sign, size_t r0, size_t r1,
                                sg_kern_q8x_t *qx, sg_kern_q8x_t *qx2)
{
    float c[SG_KERN_Q8_SPLIT_MAX];
    for (size_t r = r0; r < r1; ++r) {
        q8_row_prepare_scalar(x + r * ldx, k, mu, sign, c);
        q8_row_quant_scalar(c, k, qx, r);
        const int8_t *q1 = qx->s + r * (size_t)qx->kp;
        for (int kk = 0; kk < k; ++kk)
            c[kk] = fmaf(-(float)q1[kk], qx->scale[r], c[kk]);
        q8_row_quant_scalar(c, k, qx2, r);
    }
}

static inline float q8_out(int32_t acc, float sw, float sx, float b)
{
    return fmaf((float)acc * sw, sx, b);
}

static void q8_tile_scalar(const sg_kern_q8w_t *qw, const sg_kern_q8x_t *qx, size_t r0, size_t r1, int p0, int p1, float *y,
                           size_t ldy, unsigned flags)
{
    int j1 = p1 * SG_KERN_PANEL < qw->n ? p1 * SG_KERN_PANEL : qw->n;
    for (size_t r = r0; r < r1; ++r) {
        const int8_t *xs = qx->s + r * (size_t)qx->kp;
        for (int j = p0 * SG_KERN_PANEL; j < j1; ++j) {
            int32_t acc = 0;
            for (int kk = 0; kk < qw->kp; ++kk)
                acc += (int32_t)xs[kk] * qw->w[q8_offset(qw, j, kk)];
            float *o = &y[r * ldy + (size_t)j];
            float v = q8_out(acc, qw->scale[j], qx->scale[r], (flags & SG_KERN_Q8_ADD) ? *o : qw->b[j]);
            *o = (flags & SG_KERN_Q8_GELU) ? gelu1(v) : v;
        }
    }
}

void sg_kern_q8_epilogue(const sg_kern_q8w_t *qw, const sg_kern_q8x_t *qx, size_t r0, size_t r1, int j0, int j1, const int32_t *acc,
                         size_t ldacc, float *y, size_t ldy, unsigned flags)
{
    for (size_t r = r0; r < r1; ++r) {
        float *row = y + r * ldy;
        for (int j = j0; j < j1; ++j) {
            int32_t a;
            if (acc != NULL)
                a = acc[r * ldacc + (size_t)j];
            else
                memcpy(&a, &row[j], sizeof(a));
            float v = q8_out(a - qw->comp[j], qw->scale[j], qx->scale[r], (flags & SG_KERN_Q8_ADD) ? row[j] : qw->b[j]);
            row[j] = (flags & SG_KERN_Q8_GELU) ? gelu1(v) : v;
        }
    }
}

static void gelu_scalar(float *x, size_t n)
{
    for (size_t i = 0; i < n; ++i)
        x[i] = gelu1(x[i]);
}

size_t sg_kern_attention_scratch(int ls, int dh)
{
    size_t pad = ((size_t)ls + 15) / 16 * 16;
    return pad * (size_t)(dh + 1) + 16;
}

/* The plain form: scores of one query row, the softmax, the weighted sum of v. */
static void attention_scalar(const float *q, const float *k, const float *v, size_t ld, int ls, int dh, float scale, float *ctx,
                             size_t ldc, float *sc)
{
    for (int a = 0; a < ls; ++a) {
        const float *qa = q + (size_t)a * ld;
        float mx = -INFINITY;
        for (int b = 0; b < ls; ++b) {
            const float *kb = k + (size_t)b * ld;
            float s = 0;
            for (int d = 0; d < dh; ++d)
                s = fmaf(qa[d], kb[d], s);
            sc[b] = s * scale;
            mx = fmaxf(mx, sc[b]);
        }
        float sum = 0;
        for (int b = 0; b < ls; ++b) {
            sc[b] = expf(sc[b] - mx);
            sum += sc[b];
        }
        float inv = 1.0f / sum;
        float *ca = ctx + (size_t)a * ldc;
        for (int d = 0; d < dh; ++d)
            ca[d] = 0;
        for (int b = 0; b < ls; ++b) {
            float p = sc[b] * inv;
            const float *vb = v + (size_t)b * ld;
            for (int d = 0; d < dh; ++d)
                ca[d] = fmaf(p, vb[d], ca[d]);
        }
    }
}

#if SG_KERN_SIMD
/* libmvec's vector erff and expf; declared with the targets whose registers carry their vectors
 * (clang refuses the call otherwise: the argument's ABI differs without them) */
__attribute__((target("avx2,fma"))) __m256 _ZGVdN8v_erff(__m256 x);
__attribute__((target("avx512f"))) __m512 _ZGVeN16v_erff(__m512 x);
__attribute__((target("avx2,fma"))) __m256 _ZGVdN8v_expf(__m256 x);
__attribute__((target("avx512f"))) __m512 _ZGVeN16v_expf(__m512 x);

#define T512 __attribute__((target("avx2,fma,avx512f,avx512bw,avx512dq,avx512vl")))
#define TVNNI __attribute__((target("avx2,fma,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")))
#define T256 __attribute__((target("avx2,fma")))
#define INLINE static inline __attribute__((always_inline))

T512 INLINE __m512 gelu512(__m512 v)
{
    __m512 e = _ZGVeN16v_erff(_mm512_mul_ps(v, _mm512_set1_ps((float)M_SQRT1_2)));
    return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), v), _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

T256 INLINE __m256 gelu256(__m256 v)
{
    __m256 e = _ZGVdN8v_erff(_mm256_mul_ps(v, _mm256_set1_ps((float)M_SQRT1_2)));
    return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), v), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

T512 static void gelu_avx512(float *x, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(x + i, gelu512(_mm512_loadu_ps(x + i)));
    gelu_scalar(x + i, n - i);
}

T256 static void gelu_avx2(float *x, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, gelu256(_mm256_loadu_ps(x + i)));
    gelu_scalar(x + i, n - i);
}

/* stores 16 floats, or the first `c` of them (c < 16) */
T512 INLINE void store16(float *p, __m512 v, int c)
{
    if (c >= 16)
        _mm512_storeu_ps(p, v);
    else if (c > 0)
        _mm512_mask_storeu_ps(p, (__mmask16)((1u << c) - 1), v);
}

T256 INLINE void store8(float *p, __m256 v, int c)
{
    if (c >= 8) {
        _mm256_storeu_ps(p, v);
    } else if (c > 0) {
        float tmp[8];
        _mm256_storeu_ps(tmp, v);
        memcpy(p, tmp, (size_t)c * sizeof(float));
    }
}

/* loads 16 floats, or the first `c` of them (the rest 0) */
T512 INLINE __m512 load16(const float *p, int c)
{
    return c >= 16 ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(c > 0 ? (__mmask16)((1u << c) - 1) : 0, p);
}

T256 INLINE __m256 load8(const float *p, int c)
{
    if (c >= 8)
        return _mm256_loadu_ps(p);
    float tmp[8] = {0};
    if (c > 0)
        memcpy(tmp, p, (size_t)c * sizeof(float));
    return _mm256_loadu_ps(tmp);
}

/* ---- float32, AVX-512: MR rows x NP panels of 16 ---- */

typedef struct st_f32_args_t {
    const float *x; /* row 0 of the tile */
    size_t ldx;
    const float *w; /* panel 0 of the tile at k = 0 */
    size_t pstride; /* floats from one panel to the next */
    int k;
    float *y; /* row 0, column 0 of the tile */
    size_t ldy;
    const float *b; /* bias of the tile's column 0 */
    int ncols;      /* columns of the tile to store (the rest lie past n) */
    int gelu;
} f32_args_t;

T512 INLINE void f32_512_body(const f32_args_t *a, const int MR, const int NP)
{
    __m512 acc[F32_MR][F32_NP];
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
        for (int p = 0; p < NP; ++p)
            acc[r][p] = _mm512_setzero_ps();
    const float *w = a->w, *x = a->x;
    const size_t ps = a->pstride, lx = a->ldx;
    for (int kk = 0; kk < a->k; ++kk, w += 16) {
        __m512 wv[F32_NP];
#pragma GCC unroll 4
        for (int p = 0; p < NP; ++p)
            wv[p] = _mm512_load_ps(w + (size_t)p * ps);
#pragma GCC unroll 6
        for (int r = 0; r < MR; ++r) {
            __m512 xb = _mm512_set1_ps(x[(size_t)r * lx + (size_t)kk]);
#pragma GCC unroll 4
            for (int p = 0; p < NP; ++p)
                acc[r][p] = _mm512_fmadd_ps(xb, wv[p], acc[r][p]);
        }
    }
#pragma GCC unroll 4
    for (int p = 0; p < NP; ++p) {
        __m512 bias = _mm512_load_ps(a->b + 16 * p);
#pragma GCC unroll 6
        for (int r = 0; r < MR; ++r) {
            __m512 v = _mm512_add_ps(acc[r][p], bias);
            if (a->gelu)
                v = gelu512(v);
            store16(a->y + (size_t)r * a->ldy + (size_t)(16 * p), v, a->ncols - 16 * p);
        }
    }
}

#define F32_512(MR, NP)                                                                                                            \
    T512 static void f32_512_##MR##_##NP(const f32_args_t *a)                                                                      \
    {                                                                                                                              \
        f32_512_body(a, MR, NP);                                                                                                   \
    }
#define F32_512_ROW(MR) F32_512(MR, 1) F32_512(MR, 2) F32_512(MR, 3) F32_512(MR, 4)
F32_512_ROW(1)
F32_512_ROW(2)
F32_512_ROW(3)
F32_512_ROW(4)
F32_512_ROW(5)
F32_512_ROW(6)
#define F32_512_ENTRY(MR)                                                                                                          \
    {                                                                                                                              \
        f32_512_##MR##_1, f32_512_##MR##_2, f32_512_##MR##_3, f32_512_##MR##_4                                                     \
    }
static void (*const f32_512_kernels[F32_MR][F32_NP])(const f32_args_t *) = {F32_512_ENTRY(1), F32_512_ENTRY(2), F32_512_ENTRY(3),
                                                                            F32_512_ENTRY(4), F32_512_ENTRY(5), F32_512_ENTRY(6)};

/* ---- float32, AVX2: MR rows x 1 panel (two ymm) ---- */

T256 INLINE void f32_256_body(const f32_args_t *a, const int MR)
{
    __m256 acc[F32_MR][2];
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r)
        acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    const float *w = a->w, *x = a->x;
    const size_t lx = a->ldx;
    for (int kk = 0; kk < a->k; ++kk, w += 16) {
        __m256 w0 = _mm256_load_ps(w), w1 = _mm256_load_ps(w + 8);
#pragma GCC unroll 6
        for (int r = 0; r < MR; ++r) {
            __m256 xb = _mm256_broadcast_ss(x + (size_t)r * lx + (size_t)kk);
            acc[r][0] = _mm256_fmadd_ps(xb, w0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(xb, w1, acc[r][1]);
        }
    }
    __m256 b0 = _mm256_load_ps(a->b), b1 = _mm256_load_ps(a->b + 8);
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) {
        __m256 v0 = _mm256_add_ps(acc[r][0], b0), v1 = _mm256_add_ps(acc[r][1], b1);
        if (a->gelu) {
            v0 = gelu256(v0);
            v1 = gelu256(v1);
        }
        float *yr = a->y + (size_t)r * a->ldy;
        store8(yr, v0, a->ncols);
        store8(yr + 8, v1, a->ncols - 8);
    }
}

#define F32_256(MR)                                                                                                                \
    T256 static void f32_256_##MR(const f32_args_t *a)                                                                             \
    {                                                                                                                              \
        f32_256_body(a, MR);                                                                                                       \
    }
F32_256(1)
F32_256(2)
F32_256(3)
F32_256(4)
F32_256(5)
F32_256(6)
static void (*const f32_256_kernels[F32_MR])(const f32_args_t *) = {f32_256_1, f32_256_2, f32_256_3,
                                                                    f32_256_4, f32_256_5, f32_256_6};

static void f32_tile_simd(int kern, const sg_kern_f32w_t *pw, const float *x, size_t ldx, size_t r0, size_t r1, int p0, int p1,
                          float *y, size_t ldy, int gelu)
{
    const int np_step = kern == SG_KERN_AVX512 ? F32_NP : 1;
    const size_t pstride = (size_t)pw->k * SG_KERN_PANEL;
    /* panels outside, rows inside: a group of panels stays in L1/L2 while every row passes over it */
    for (int p = p0; p < p1; p += np_step) {
        int np = p1 - p < np_step ? p1 - p : np_step;
        for (size_t r = r0; r < r1; r += F32_MR) {
            int mr = r1 - r < F32_MR ? (int)(r1 - r) : F32_MR;
            f32_args_t a = {x + r * ldx,
                            ldx,
                            pw->w + (size_t)p * pstride,
                            pstride,
                            pw->k,
                            y + r * ldy + (size_t)p * SG_KERN_PANEL,
                            ldy,
                            pw->b + (size_t)p * SG_KERN_PANEL,
                            pw->n - p * SG_KERN_PANEL,
                            gelu};
            if (kern == SG_KERN_AVX512)
                f32_512_kernels[mr - 1][np - 1](&a);
            else
                f32_256_kernels[mr - 1](&a);
        }
    }
}

/* ---- int8: quantisation ---- */

/* x[r] - mu (mu NULL: x[r]) at kk, the lanes past k zero */
T512 INLINE __m512 centred512(const float *xr, const float *mu, int kk, __mmask16 mk)
{
    __m512 v = _mm512_maskz_loadu_ps(mk, xr + kk);
    return mu != NULL ? _mm512_sub_ps(v, _mm512_maskz_loadu_ps(mk, mu + kk)) : v;
}

T512 static void q8_quantize_512(const float *x, size_t ldx, int k, const float *mu, size_t r0, size_t r1, sg_kern_q8x_t *qx)
{
    const __m512 sign = _mm512_set1_ps(-0.0f);
    for (size_t r = r0; r < r1; ++r) {
        const float *xr = x + r * ldx;
        __m512 m = _mm512_setzero_ps();
        int kk = 0;
        for (; kk + 16 <= k; kk += 16)
            m = _mm512_max_ps(m, _mm512_andnot_ps(sign, centred512(xr, mu, kk, (__mmask16)0xffff)));
        if (kk < k)
            m = _mm512_max_ps(m, _mm512_andnot_ps(sign, centred512(xr, mu, kk, (__mmask16)((1u << (k - kk)) - 1))));
        float mx = _mm512_reduce_max_ps(m);
        float inv = mx > 0 ? 127.0f / mx : 0.0f;
        qx->scale[r] = mx / 127.0f;
        const __m512 vinv = _mm512_set1_ps(inv), lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
        int8_t *s = qx->s + r * (size_t)qx->kp;
        uint8_t *u = qx->u + r * (size_t)qx->kp;
        for (kk = 0; kk < qx->kp; kk += 16) {
            int c = k - kk;
            __mmask16 mk = c >= 16 ? (__mmask16)0xffff : c > 0 ? (__mmask16)((1u << c) - 1) : 0;
            __m512 v = _mm512_mul_ps(centred512(xr, mu, kk, mk), vinv);
            v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
            __m128i q = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(v));
            __m128i uq = _mm_xor_si128(q, _mm_set1_epi8((char)0x80));
            int n = qx->kp - kk < 16 ? qx->kp - kk : 16;
            if (n == 16) {
                _mm_storeu_si128((__m128i *)(s + kk), q);
                _mm_storeu_si128((__m128i *)(u + kk), uq);
            } else {
                _mm_mask_storeu_epi8(s + kk, (__mmask16)((1u << n) - 1), q);
                _mm_mask_storeu_epi8(u + kk, (__mmask16)((1u << n) - 1), uq);
            }
        }
    }
}

T256 INLINE __m256 centred256(const float *xr, const float *mu, int kk)
{
    __m256 v = _mm256_loadu_ps(xr + kk);
    return mu != NULL ? _mm256_sub_ps(v, _mm256_loadu_ps(mu + kk)) : v;
}

T256 static void q8_quantize_256(const float *x, size_t ldx, int k, const float *mu, size_t r0, size_t r1, sg_kern_q8x_t *qx)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (size_t r = r0; r < r1; ++r) {
        const float *xr = x + r * ldx;
        __m256 m = _mm256_setzero_ps();
        int kk = 0;
        for (; kk + 8 <= k; kk += 8)
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, centred256(xr, mu, kk)));
        float lanes[8], mx = 0;
        _mm256_storeu_ps(lanes, m);
        for (int i = 0; i < 8; ++i)
            mx = fmaxf(mx, lanes[i]);
        for (; kk < k; ++kk)
            mx = fmaxf(mx, fabsf(mu != NULL ? xr[kk] - mu[kk] : xr[kk]));
        float inv = mx > 0 ? 127.0f / mx : 0.0f;
        qx->scale[r] = mx / 127.0f;
        int8_t *s = qx->s + r * (size_t)qx->kp;
        uint8_t *u = qx->u + r * (size_t)qx->kp;
        const __m256 vinv = _mm256_set1_ps(inv), lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
        for (kk = 0; kk + 8 <= k; kk += 8) {
            __m256 v = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(centred256(xr, mu, kk), vinv), lo), hi);
            __m256i q32 = _mm256_cvtps_epi32(v);
            __m128i q16 = _mm_packs_epi32(_mm256_castsi256_si128(q32), _mm256_extracti128_si256(q32, 1));
            __m128i q8 = _mm_packs_epi16(q16, q16);
            _mm_storel_epi64((__m128i *)(s + kk), q8);
            _mm_storel_epi64((__m128i *)(u + kk), _mm_xor_si128(q8, _mm_set1_epi8((char)0x80)));
        }
        for (; kk < qx->kp; ++kk) {
            int q = kk < k ? quant(mu != NULL ? xr[kk] - mu[kk] : xr[kk], inv) : 0;
            s[kk] = (int8_t)q;
            u[kk] = (uint8_t)(q + 128);
        }
    }
}

/* One in-vector stage of the rotation: lanes with bit h clear get v + t, the others t - v, where t
 * is v with the lanes of the pair swapped (fwht_block's a + b and a - b). */
T512 INLINE __m512 fwht_stage512(__m512 v, __m512 t, __mmask16 hi)
{
    return _mm512_mask_sub_ps(_mm512_add_ps(v, t), hi, t, v);
}

/* fwht_block on four vectors: stages 1, 2, 4, 8 inside each, then 16 and 32 across them */
T512 INLINE void fwht512(__m512 *v)
{
    for (int i = 0; i < 4; ++i) {
        __m512 x = v[i];
        x = fwht_stage512(x, _mm512_permute_ps(x, 0xB1), 0xAAAA);
        x = fwht_stage512(x, _mm512_permute_ps(x, 0x4E), 0xCCCC);
        x = fwht_stage512(x, _mm512_shuffle_f32x4(x, x, 0xB1), 0xF0F0);
        v[i] = fwht_stage512(x, _mm512_shuffle_f32x4(x, x, 0x4E), 0xFF00);
    }
    for (int h = 1; h <= 2; h <<= 1) {
        for (int i = 0; i < 4; ++i) {
            if (i & h)
                continue;
            __m512 a = v[i], b = v[i + h];
            v[i] = _mm512_add_ps(a, b);
            v[i + h] = _mm512_sub_ps(a, b);
        }
    }
    for (int i = 0; i < 4; ++i)
        v[i] = _mm512_mul_ps(v[i], _mm512_set1_ps(0.125f));
}

T512 INLINE void rot_block512(const float *xr, const float *mu, const float *sign, int blk, __m512 *v)
{
    const int k0 = blk * SG_KERN_ROT;
    for (int i = 0; i < 4; ++i)
        v[i] = _mm512_mul_ps(centred512(xr, mu, k0 + 16 * i, (__mmask16)0xffff), _mm512_loadu_ps(sign + k0 + 16 * i));
    fwht512(v);
}

T512 static void q8_row_prepare512(const float *xr, int k, const float *mu, const float *sign, float *c);
T512 static void q8_row_quant512(const float *c, int k, sg_kern_q8x_t *qx, size_t r);

T512 static void q8_quantize_rot512(const float *x, size_t ldx, int k, const float *mu, const float *sign, size_t r0, size_t r1,
                                    sg_kern_q8x_t *qx)
{
    if (k <= ROT_KEEP) { /* the rotated row kept between its maximum and its quantisation: rotated once */
        float keep[ROT_KEEP] __attribute__((aligned(64)));
        for (size_t r = r0; r < r1; ++r) {
            q8_row_prepare512(x + r * ldx, k, mu, sign, keep);
            q8_row_quant512(keep, k, qx, r);
        }
        return;
    }
    const __m512 abs = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    __m512 v[4];
    for (size_t r = r0; r < r1; ++r) { /* longer rows: rotated for the maximum, then again to quantise */
        const float *xr = x + r * ldx;
        __m512 m = _mm512_setzero_ps();
        for (int blk = 0; blk < k / SG_KERN_ROT; ++blk) {
            rot_block512(xr, mu, sign, blk, v);
            for (int i = 0; i < 4; ++i)
                m = _mm512_max_ps(m, _mm512_and_ps(v[i], abs));
        }
        float mx = _mm512_reduce_max_ps(m);
        float inv = mx > 0 ? 127.0f / mx : 0.0f;
        qx->scale[r] = mx / 127.0f;
        const __m512 vinv = _mm512_set1_ps(inv), lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
        int8_t *s = qx->s + r * (size_t)qx->kp;
        uint8_t *u = qx->u + r * (size_t)qx->kp;
        for (int blk = 0; blk < k / SG_KERN_ROT; ++blk) {
            rot_block512(xr, mu, sign, blk, v);
            for (int i = 0; i < 4; ++i) {
                __m512 q32 = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v[i], vinv), lo), hi);
                __m128i q = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(q32));
                _mm_storeu_si128((__m128i *)(s + blk * SG_KERN_ROT + 16 * i), q);
                _mm_storeu_si128((__m128i *)(u + blk * SG_KERN_ROT + 16 * i), _mm_xor_si128(q, _mm_set1_epi8((char)0x80)));
            }
        }
    }
}

/* the same on eight 8-float vectors: stages 1, 2, 4 inside each, 8, 16 and 32 across them */
T256 INLINE __m256 fwht_stage256(__m256 v, __m256 t, const int hi)
{
    __m256 sum = _mm256_add_ps(v, t), diff = _mm256_sub_ps(t, v);
    return hi == 0xAA   ? _mm256_blend_ps(sum, diff, 0xAA)
           : hi == 0xCC ? _mm256_blend_ps(sum, diff, 0xCC)
                        : _mm256_blend_ps(sum, diff, 0xF0);
}

T256 INLINE void rot_block256(const float *xr, const float *mu, const float *sign, int blk, __m256 *v)
{
    const int k0 = blk * SG_KERN_ROT;
    for (int i = 0; i < 8; ++i) {
        __m256 x = _mm256_mul_ps(centred256(xr, mu, k0 + 8 * i), _mm256_loadu_ps(sign + k0 + 8 * i));
        x = fwht_stage256(x, _mm256_permute_ps(x, 0xB1), 0xAA);
        x = fwht_stage256(x, _mm256_permute_ps(x, 0x4E), 0xCC);
        v[i] = fwht_stage256(x, _mm256_permute2f128_ps(x, x, 0x01), 0xF0);
    }
    for (int h = 1; h <= 4; h <<= 1) {
        for (int i = 0; i < 8; ++i) {
            if (i & h)
                continue;
            __m256 a = v[i], b = v[i + h];
            v[i] = _mm256_add_ps(a, b);
            v[i + h] = _mm256_sub_ps(a, b);
        }
    }
    for (int i = 0; i < 8; ++i)
        v[i] = _mm256_mul_ps(v[i], _mm256_set1_ps(0.125f));
}

T256 static void q8_row_prepare256(const float *xr, int k, const float *mu, const float *sign, float *c);
T256 static void q8_row_quant256(const float *c, int k, sg_kern_q8x_t *qx, size_t r);

T256 static void q8_quantize_rot256(const float *x, size_t ldx, int k, const float *mu, const float *sign, size_t r0, size_t r1,
                                    sg_kern_q8x_t *qx)
{
    if (k <= ROT_KEEP) { /* the rotated row kept between its maximum and its quantisation: rotated once */
        float keep[ROT_KEEP] __attribute__((aligned(32)));
        for (size_t r = r0; r < r1; ++r) {
            q8_row_prepare256(x + r * ldx, k, mu, sign, keep);
            q8_row_quant256(keep, k, qx, r);
        }
        return;
    }
    const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 v[8];
    for (size_t r = r0; r < r1; ++r) { /* longer rows: rotated for the maximum, then again to quantise */
        const float *xr = x + r * ldx;
        __m256 m = _mm256_setzero_ps();
        for (int blk = 0; blk < k / SG_KERN_ROT; ++blk) {
            rot_block256(xr, mu, sign, blk, v);
            for (int i = 0; i < 8; ++i)
                m = _mm256_max_ps(m, _mm256_and_ps(v[i], abs));
        }
        float lanes[8], mx = 0;
        _mm256_storeu_ps(lanes, m);
        for (int i = 0; i < 8; ++i)
            mx = fmaxf(mx, lanes[i]);
        float inv = mx > 0 ? 127.0f / mx : 0.0f;
        qx->scale[r] = mx / 127.0f;
        const __m256 vinv = _mm256_set1_ps(inv), lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
        int8_t *s = qx->s + r * (size_t)qx->kp;
        uint8_t *u = qx->u + r * (size_t)qx->kp;
        for (int blk = 0; blk < k / SG_KERN_ROT; ++blk) {
            rot_block256(xr, mu, sign, blk, v);
            for (int i = 0; i < 8; ++i) {
                __m256i q32 = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(v[i], vinv), lo), hi));
                __m128i q16 = _mm_packs_epi32(_mm256_castsi256_si128(q32), _mm256_extracti128_si256(q32, 1));
                __m128i q8 = _mm_packs_epi16(q16, q16);
                _mm_storel_epi64((__m128i *)(s + blk * SG_KERN_ROT + 8 * i), q8);
                _mm_storel_epi64((__m128i *)(u + blk * SG_KERN_ROT + 8 * i), _mm_xor_si128(q8, _mm_set1_epi8((char)0x80)));
            }
        }
    }
}

/* Two terms on AVX2 (the same numbers) */
T256 static void q8_row_prepare256(const float *xr, int k, const float *mu, const float *sign, float *c)
{
    if (sign != NULL) {
        __m256 v[8];
        for (int blk = 0; blk < k / SG_KERN_ROT; ++blk) {
            rot_block256(xr, mu, sign, blk, v);
            for (int i = 0; i < 8; ++i)
                _mm256_store_ps(c + blk * SG_KERN_ROT + 8 * i, v[i]);
        }
        return;
    }
    int kk = 0;
    for (; kk + 8 <= k; kk += 8)
        _mm256_store_ps(c + kk, centred256(xr, mu, kk));
    for (; kk < k; ++kk)
        c[kk] = mu != NULL ? xr[kk] - mu[kk] : xr[kk];
}

T256 static void q8_row_quant256(const float *c, int k, sg_kern_q8x_t *qx, size_t r)
{
    const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 m = _mm256_setzero_ps();
    for (int kk = 0; kk < k; kk += 8)
        m = _mm256_max_ps(m, _mm256_and_ps(_mm256_load_ps(c + kk), abs));
    float lanes[8], mx = 0;
    _mm256_storeu_ps(lanes, m);
    for (int i = 0; i < 8; ++i)
        mx = fmaxf(mx, lanes[i]);
    float inv = mx > 0 ? 127.0f / mx : 0.0f;
    qx->scale[r] = mx / 127.0f;
    const __m256 vinv = _mm256_set1_ps(inv), lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    int8_t *s = qx->s + r * (size_t)qx->kp;
    uint8_t *u = qx->u + r * (size_t)qx->kp;
    int kk = 0;
    for (; kk + 8 <= qx->kp; kk += 8) {
        __m256i q32 = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(_mm256_load_ps(c + kk), vinv), lo), hi));
        __m128i q16 = _mm_packs_epi32(_mm256_castsi256_si128(q32), _mm256_extracti128_si256(q32, 1));
        __m128i q8 = _mm_packs_epi16(q16, q16);
        _mm_storel_epi64((__m128i *)(s + kk), q8);
        _mm_storel_epi64((__m128i *)(u + kk), _mm_xor_si128(q8, _mm_set1_epi8((char)0x80)));
    }
    for (; kk < qx->kp; ++kk) {
        int q = kk < k ? quant(c[kk], inv) : 0;
        s[kk] = (int8_t)q;
        u[kk] = (uint8_t)(q + 128);
    }
}

T256 static void q8_quantize2_256(const float *x, size_t ldx, int k, const float *mu, const float *sign, size_t r0, size_t r1,
                                  sg_kern_q8x_t *qx, sg_kern_q8x_t *qx2)
{
    float c[SG_KERN_Q8_SPLIT_MAX + 8] __attribute__((aligned(32)));
    const int k8 = (k + 7) / 8 * 8;
    for (size_t r = r0; r < r1; ++r) {
        memset(c + k8 - 8, 0, 8 * sizeof(float));
        q8_row_prepare256(x + r * ldx, k, mu, sign, c);
        q8_row_quant256(c, k, qx, r);
        const int8_t *q1 = qx->s + r * (size_t)qx->kp;
        const __m256 s1 = _mm256_set1_ps(qx->scale[r]);
        int kk = 0;
        for (; kk + 8 <= k; kk += 8) {
            __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(q1 + kk))));
            _mm256_store_ps(c + kk, _mm256_fnmadd_ps(q, s1, _mm256_load_ps(c + kk)));
        }
        for (; kk < k; ++kk)
            c[kk] = fmaf(-(float)q1[kk], qx->scale[r], c[kk]);
        q8_row_quant256(c, k, qx2, r);
    }
}

/* Two terms on AVX-512: the prepared row in c (zero past k, to a multiple of 16), as the scalar
 * version computes it */
T512 static void q8_row_prepare512(const float *xr, int k, const float *mu, const float *sign, float *c)
{
    if (sign != NULL) {
        __m512 v[4];
        for (int blk = 0; blk < k / SG_KERN_ROT; ++blk) {
            rot_block512(xr, mu, sign, blk, v);
            for (int i = 0; i < 4; ++i)
                _mm512_store_ps(c + blk * SG_KERN_ROT + 16 * i, v[i]);
        }
        return;
    }
    for (int kk = 0; kk < k; kk += 16) {
        __mmask16 mk = k - kk >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (k - kk)) - 1);
        _mm512_store_ps(c + kk, centred512(xr, mu, kk, mk));
    }
}

T512 static void q8_row_quant512(const float *c, int k, sg_kern_q8x_t *qx, size_t r)
{
    const __m512 abs = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    __m512 m = _mm512_setzero_ps();
    for (int kk = 0; kk < k; kk += 16)
        m = _mm512_max_ps(m, _mm512_and_ps(_mm512_load_ps(c + kk), abs));
    float mx = _mm512_reduce_max_ps(m);
    float inv = mx > 0 ? 127.0f / mx : 0.0f;
    qx->scale[r] = mx / 127.0f;
    const __m512 vinv = _mm512_set1_ps(inv), lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
    int8_t *s = qx->s + r * (size_t)qx->kp;
    uint8_t *u = qx->u + r * (size_t)qx->kp;
    for (int kk = 0; kk < qx->kp; kk += 16) {
        __m512 v = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(_mm512_load_ps(c + kk), vinv), lo), hi);
        __m128i q = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(v));
        __mmask16 mk = qx->kp - kk >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (qx->kp - kk)) - 1);
        _mm_mask_storeu_epi8(s + kk, mk, q);
        _mm_mask_storeu_epi8(u + kk, mk, _mm_xor_si128(q, _mm_set1_epi8((char)0x80)));
    }
}

T512 static void q8_quantize2_512(const float *x, size_t ldx, int k, const float *mu, const float *sign, size_t r0, size_t r1,
                                  sg_kern_q8x_t *qx, sg_kern_q8x_t *qx2)
{
    float c[SG_KERN_Q8_SPLIT_MAX + 16] __attribute__((aligned(64)));
    const int k16 = (k + 15) / 16 * 16;
    for (size_t r = r0; r < r1; ++r) {
        memset(c + k16 - 16, 0, 16 * sizeof(float));
        q8_row_prepare512(x + r * ldx, k, mu, sign, c);
        q8_row_quant512(c, k, qx, r);
        const int8_t *q1 = qx->s + r * (size_t)qx->kp;
        const __m512 s1 = _mm512_set1_ps(qx->scale[r]);
        for (int kk = 0; kk < k; kk += 16) {
            __mmask16 mk = k - kk >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (k - kk)) - 1);
            __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(mk, q1 + kk)));
            _mm512_store_ps(c + kk, _mm512_maskz_mov_ps(mk, _mm512_fnmadd_ps(q, s1, _mm512_load_ps(c + kk))));
        }
        q8_row_quant512(c, k, qx2, r);
    }
}

/* ---- int8, VNNI: MR rows x NP panels ---- */

typedef struct st_q8_args_t {
    const uint8_t *xu; /* VNNI: q + 128 */
    const int8_t *xs;  /* AVX2: q */
    size_t ldx;        /* bytes */
    const float *sx;   /* row scales of the tile's rows */
    const int8_t *w;   /* panel 0 at k = 0 */
    size_t pstride;    /* bytes from one panel to the next */
    int kq;            /* groups of four k */
    float *y;
    size_t ldy;
    const float *sw, *b; /* the tile's column 0 */
    const int32_t *comp;
    int ncols;
    unsigned flags; /* SG_KERN_Q8_GELU, SG_KERN_Q8_ADD (y's values in place of the bias) */
} q8_args_t;

/* one output vector of a VNNI tile: the compensation off, the scales, the bias, GELU, stored */
TVNNI INLINE void q8_vnni_out(const q8_args_t *a, int r, int p, __m512i acc)
{
    float *o = a->y + (size_t)r * a->ldy + (size_t)(16 * p);
    __m512i comp = _mm512_load_si512((const void *)(a->comp + 16 * p));
    __m512 sw = _mm512_load_ps(a->sw + 16 * p);
    __m512 b = (a->flags & SG_KERN_Q8_ADD) ? load16(o, a->ncols - 16 * p) : _mm512_load_ps(a->b + 16 * p);
    __m512 v = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc, comp));
    v = _mm512_fmadd_ps(_mm512_mul_ps(v, sw), _mm512_set1_ps(a->sx[r]), b);
    if (a->flags & SG_KERN_Q8_GELU)
        v = gelu512(v);
    store16(o, v, a->ncols - 16 * p);
}

/* acc += the four-byte dot products of x (unsigned) and w (signed). As an asm statement rather than
 * _mm512_dpbusd_epi32: GCC 12 copies the accumulator around the intrinsic and keeps a copy of each
 * on the stack, a load and a store per product; in place, the 24 accumulators stay in registers. */
#define DPBUSD(acc, x, w) __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(x), "v"(w))
#define QV_ROW(r)                                                                                                                  \
    if (MR > r) {                                                                                                                  \
        int32_t x4;                                                                                                                \
        memcpy(&x4, x + (size_t)(r)*lx, 4);                                                                                        \
        __m512i xb = _mm512_set1_epi32(x4);                                                                                        \
        DPBUSD(a##r##0, xb, w0);                                                                                                   \
        if (NP > 1)                                                                                                                \
            DPBUSD(a##r##1, xb, w1);                                                                                               \
        if (NP > 2)                                                                                                                \
            DPBUSD(a##r##2, xb, w2);                                                                                               \
        if (NP > 3)                                                                                                                \
            DPBUSD(a##r##3, xb, w3);                                                                                               \
    }
#define QV_OUT(r)                                                                                                                  \
    if (MR > r) {                                                                                                                  \
        q8_vnni_out(a, r, 0, a##r##0);                                                                                             \
        if (NP > 1)                                                                                                                \
            q8_vnni_out(a, r, 1, a##r##1);                                                                                         \
        if (NP > 2)                                                                                                                \
            q8_vnni_out(a, r, 2, a##r##2);                                                                                         \
        if (NP > 3)                                                                                                                \
            q8_vnni_out(a, r, 3, a##r##3);                                                                                         \
    }
#define QV_ZERO(r) __m512i a##r##0 = z, a##r##1 = z, a##r##2 = z, a##r##3 = z;

TVNNI INLINE void q8_vnni_body(const q8_args_t *a, const int MR, const int NP)
{
    const __m512i z = _mm512_setzero_si512();
    QV_ZERO(0) QV_ZERO(1) QV_ZERO(2) QV_ZERO(3) QV_ZERO(4) QV_ZERO(5);
    const int8_t *w = a->w;
    const uint8_t *x = a->xu;
    const size_t ps = a->pstride, lx = a->ldx;
    for (int q = 0; q < a->kq; ++q, w += 64, x += 4) {
        __m512i w0 = _mm512_load_si512((const void *)w), w1 = z, w2 = z, w3 = z;
        if (NP > 1)
            w1 = _mm512_load_si512((const void *)(w + ps));
        if (NP > 2)
            w2 = _mm512_load_si512((const void *)(w + 2 * ps));
        if (NP > 3)
            w3 = _mm512_load_si512((const void *)(w + 3 * ps));
        QV_ROW(0) QV_ROW(1) QV_ROW(2) QV_ROW(3) QV_ROW(4) QV_ROW(5)
    }
    QV_OUT(0) QV_OUT(1) QV_OUT(2) QV_OUT(3) QV_OUT(4) QV_OUT(5)
}

#define Q8_VNNI(MR, NP)                                                                                                            \
    TVNNI static void q8_vnni_##MR##_##NP(const q8_args_t *a)                                                                      \
    {                                                                                                                              \
        q8_vnni_body(a, MR, NP);                                                                                                   \
    }
#define Q8_VNNI_ROW(MR) Q8_VNNI(MR, 1) Q8_VNNI(MR, 2) Q8_VNNI(MR, 3) Q8_VNNI(MR, 4)
Q8_VNNI_ROW(1)
Q8_VNNI_ROW(2)
Q8_VNNI_ROW(3)
Q8_VNNI_ROW(4)
Q8_VNNI_ROW(5)
Q8_VNNI_ROW(6)
#define Q8_VNNI_ENTRY(MR)                                                                                                          \
    {                                                                                                                              \
        q8_vnni_##MR##_1, q8_vnni_##MR##_2, q8_vnni_##MR##_3, q8_vnni_##MR##_4                                                     \
    }
static void (*const q8_vnni_kernels[Q8_MR][Q8_NP])(const q8_args_t *) = {Q8_VNNI_ENTRY(1), Q8_VNNI_ENTRY(2), Q8_VNNI_ENTRY(3),
                                                                         Q8_VNNI_ENTRY(4), Q8_VNNI_ENTRY(5), Q8_VNNI_ENTRY(6)};

/* ---- int8, AVX2: MR rows x 1 panel; products |x| * sign(w, x) never saturate ---- */

/* AVX2, 8-bit weights: vpmaddubsw on |x| (unsigned, <= 127) and sign(w, x), so a pair of
 * products is at most 2 * 127 * 127 = 32258 and the 16-bit sums cannot saturate; vpmaddwd with
 * ones widens the pairs to int32. 7-bit weights (W7, |w| <= 63): the unsigned x + 128 times w
 * directly (2 * 255 * 63 = 32130 < 32767, no sign step), the column sums 128 * sum w subtracted
 * after, as with VNNI. */
T256 INLINE void q8_256_body(const q8_args_t *a, const int MR, const int W7)
{
    __m256i acc[Q8A7_MR][2];
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r)
        acc[r][0] = acc[r][1] = _mm256_setzero_si256();
    const __m256i ones = _mm256_set1_epi16(1);
    const int8_t *w = a->w, *x = a->xs;
    const uint8_t *xu = a->xu;
    const size_t lx = a->ldx;
    for (int q = 0; q < a->kq; ++q, w += 64, x += 4, xu += 4) {
        __m256i w0 = _mm256_load_si256((const __m256i *)w), w1 = _mm256_load_si256((const __m256i *)(w + 32));
#pragma GCC unroll 4
        for (int r = 0; r < MR; ++r) {
            int32_t x4;
            __m256i t0, t1;
            if (W7) {
                memcpy(&x4, xu + (size_t)r * lx, 4);
                __m256i xb = _mm256_set1_epi32(x4);
                t0 = _mm256_madd_epi16(_mm256_maddubs_epi16(xb, w0), ones);
                t1 = _mm256_madd_epi16(_mm256_maddubs_epi16(xb, w1), ones);
            } else {
                memcpy(&x4, x + (size_t)r * lx, 4);
                __m256i xs = _mm256_set1_epi32(x4), xa = _mm256_abs_epi8(xs);
                t0 = _mm256_madd_epi16(_mm256_maddubs_epi16(xa, _mm256_sign_epi8(w0, xs)), ones);
                t1 = _mm256_madd_epi16(_mm256_maddubs_epi16(xa, _mm256_sign_epi8(w1, xs)), ones);
            }
            acc[r][0] = _mm256_add_epi32(acc[r][0], t0);
            acc[r][1] = _mm256_add_epi32(acc[r][1], t1);
        }
    }
    __m256 sw0 = _mm256_load_ps(a->sw), sw1 = _mm256_load_ps(a->sw + 8);
    __m256 b0 = _mm256_load_ps(a->b), b1 = _mm256_load_ps(a->b + 8);
    __m256i c0 = _mm256_setzero_si256(), c1 = c0;
    if (W7) {
        c0 = _mm256_load_si256((const __m256i *)a->comp);
        c1 = _mm256_load_si256((const __m256i *)(a->comp + 8));
    }
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r) {
        __m256 sx = _mm256_set1_ps(a->sx[r]);
        float *yr = a->y + (size_t)r * a->ldy;
        if (a->flags & SG_KERN_Q8_ADD) {
            b0 = load8(yr, a->ncols);
            b1 = load8(yr + 8, a->ncols - 8);
        }
        __m256 v0 = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(acc[r][0], c0)), sw0), sx, b0);
        __m256 v1 = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(acc[r][1], c1)), sw1), sx, b1);
        if (a->flags & SG_KERN_Q8_GELU) {
            v0 = gelu256(v0);
            v1 = gelu256(v1);
        }
        store8(yr, v0, a->ncols);
        store8(yr + 8, v1, a->ncols - 8);
    }
}

#define Q8_256(MR, W7, name)                                                                                                       \
    T256 static void name(const q8_args_t *a)                                                                                      \
    {                                                                                                                              \
        q8_256_body(a, MR, W7);                                                                                                    \
    }
Q8_256(1, 0, q8_256_1)
Q8_256(2, 0, q8_256_2)
Q8_256(3, 0, q8_256_3)
Q8_256(1, 1, q8_256w7_1)
Q8_256(2, 1, q8_256w7_2)
Q8_256(3, 1, q8_256w7_3)
Q8_256(4, 1, q8_256w7_4)
static void (*const q8_256_kernels[Q8A_MR])(const q8_args_t *) = {q8_256_1, q8_256_2, q8_256_3};
static void (*const q8_256w7_kernels[Q8A7_MR])(const q8_args_t *) = {q8_256w7_1, q8_256w7_2, q8_256w7_3, q8_256w7_4};

static void q8_tile_simd(int kern, const sg_kern_q8w_t *qw, const sg_kern_q8x_t *qx, size_t r0, size_t r1, int p0, int p1, float *y,
                         size_t ldy, unsigned flags)
{
    const int vnni = kern == SG_KERN_VNNI, w7 = qw->bits == 7, np_step = vnni ? Q8_NP : 1;
    const int mr_max = vnni ? Q8_MR : w7 ? Q8A7_MR : Q8A_MR;
    const size_t pstride = (size_t)qw->kp * SG_KERN_PANEL;
    for (int p = p0; p < p1; p += np_step) {
        int np = p1 - p < np_step ? p1 - p : np_step;
        for (size_t r = r0; r < r1; r += (size_t)mr_max) {
            int mr = r1 - r < (size_t)mr_max ? (int)(r1 - r) : mr_max;
            size_t c0 = (size_t)p * SG_KERN_PANEL;
            q8_args_t a = {qx->u + r * (size_t)qx->kp,
                           qx->s + r * (size_t)qx->kp,
                           (size_t)qx->kp,
                           qx->scale + r,
                           qw->w + (size_t)p * pstride,
                           pstride,
                           qw->kp / 4,
                           y + r * ldy + c0,
                           ldy,
                           qw->scale + c0,
                           qw->b + c0,
                           qw->comp + c0,
                           qw->n - p * SG_KERN_PANEL,
                           flags};
            if (vnni)
                q8_vnni_kernels[mr - 1][np - 1](&a);
            else if (w7)
                q8_256w7_kernels[mr - 1](&a);
            else
                q8_256_kernels[mr - 1](&a);
        }
    }
}

/* ---- fused attention ----
 *
 * Per query row a: the scores s[b] = scale q[a] . k[b], computed 16 (or 8) keys at a time from a
 * transposed copy of k (kt[d][b], made once per call), so the sums run across vector lanes with
 * no horizontal reduction; the softmax over s in place; then ctx[a] = sum_b p[b] v[b], dh floats
 * of accumulators. Everything but the rows of q, k and v stays in scratch sized for the sequence. */

T512 static void attention_512(const float *q, const float *k, const float *v, size_t ld, int ls, int dh, float scale, float *ctx,
                               size_t ldc, float *scratch)
{
    const int pad = (ls + 15) / 16 * 16;
    float *kt = scratch, *sc = scratch + (size_t)pad * (size_t)dh;
    for (int d = 0; d < dh; ++d) {
        float *row = kt + (size_t)d * (size_t)pad;
        for (int b = 0; b < ls; ++b)
            row[b] = k[(size_t)b * ld + (size_t)d];
        for (int b = ls; b < pad; ++b)
            row[b] = 0;
    }
    const __m512 vscale = _mm512_set1_ps(scale);
    const __mmask16 tail = (ls % 16) != 0 ? (__mmask16)((1u << (ls % 16)) - 1) : (__mmask16)0xffff;
    for (int a = 0; a < ls; ++a) {
        const float *qa = q + (size_t)a * ld;
        __m512 mx = _mm512_set1_ps(-INFINITY);
        for (int b0 = 0; b0 < pad; b0 += 64) { /* up to 4 vectors of keys at a time */
            int nb = (pad - b0) / 16 < 4 ? (pad - b0) / 16 : 4;
            __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
            const float *kc = kt + b0;
            for (int d = 0; d < dh; ++d, kc += pad) {
                __m512 qb = _mm512_set1_ps(qa[d]);
                s0 = _mm512_fmadd_ps(qb, _mm512_loadu_ps(kc), s0);
                if (nb > 1)
                    s1 = _mm512_fmadd_ps(qb, _mm512_loadu_ps(kc + 16), s1);
                if (nb > 2)
                    s2 = _mm512_fmadd_ps(qb, _mm512_loadu_ps(kc + 32), s2);
                if (nb > 3)
                    s3 = _mm512_fmadd_ps(qb, _mm512_loadu_ps(kc + 48), s3);
            }
            __m512 s[4] = {s0, s1, s2, s3};
            for (int i = 0; i < nb; ++i) {
                __m512 si = _mm512_mul_ps(s[i], vscale);
                _mm512_storeu_ps(sc + b0 + 16 * i, si);
                __mmask16 m = b0 + 16 * i + 16 >= pad ? tail : (__mmask16)0xffff;
                mx = _mm512_mask_max_ps(mx, m, mx, si);
            }
        }
        const __m512 vmax = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
        __m512 sum = _mm512_setzero_ps();
        for (int b0 = 0; b0 < pad; b0 += 16) {
            __mmask16 m = b0 + 16 >= pad ? tail : (__mmask16)0xffff;
            __m512 e = _mm512_maskz_mov_ps(m, _ZGVeN16v_expf(_mm512_sub_ps(_mm512_loadu_ps(sc + b0), vmax)));
            _mm512_storeu_ps(sc + b0, e);
            sum = _mm512_add_ps(sum, e);
        }
        const float inv = 1.0f / _mm512_reduce_add_ps(sum);
        float *ca = ctx + (size_t)a * ldc;
        for (int d0 = 0; d0 < dh; d0 += 64) { /* up to 4 vectors of the head at a time */
            int nd = dh - d0 < 64 ? dh - d0 : 64;
            __mmask16 dm[4];
            for (int i = 0; i < 4; ++i) {
                int c = nd - 16 * i;
                dm[i] = c >= 16 ? (__mmask16)0xffff : c > 0 ? (__mmask16)((1u << c) - 1) : 0;
            }
            __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
            for (int b = 0; b < ls; ++b) {
                const float *vb = v + (size_t)b * ld + d0;
                __m512 pb = _mm512_set1_ps(sc[b] * inv);
                c0 = _mm512_fmadd_ps(pb, _mm512_maskz_loadu_ps(dm[0], vb), c0);
                if (dm[1])
                    c1 = _mm512_fmadd_ps(pb, _mm512_maskz_loadu_ps(dm[1], vb + 16), c1);
                if (dm[2])
                    c2 = _mm512_fmadd_ps(pb, _mm512_maskz_loadu_ps(dm[2], vb + 32), c2);
                if (dm[3])
                    c3 = _mm512_fmadd_ps(pb, _mm512_maskz_loadu_ps(dm[3], vb + 48), c3);
            }
            _mm512_mask_storeu_ps(ca + d0, dm[0], c0);
            _mm512_mask_storeu_ps(ca + d0 + 16, dm[1], c1);
            _mm512_mask_storeu_ps(ca + d0 + 32, dm[2], c2);
            _mm512_mask_storeu_ps(ca + d0 + 48, dm[3], c3);
        }
    }
}

T256 static void attention_256(const float *q, const float *k, const float *v, size_t ld, int ls, int dh, float scale, float *ctx,
                               size_t ldc, float *scratch)
{
    const int pad = (ls + 7) / 8 * 8;
    float *kt = scratch, *sc = scratch + (size_t)pad * (size_t)dh;
    for (int d = 0; d < dh; ++d) {
        float *row = kt + (size_t)d * (size_t)pad;
        for (int b = 0; b < ls; ++b)
            row[b] = k[(size_t)b * ld + (size_t)d];
        for (int b = ls; b < pad; ++b)
            row[b] = 0;
    }
    const __m256 vscale = _mm256_set1_ps(scale);
    for (int a = 0; a < ls; ++a) {
        const float *qa = q + (size_t)a * ld;
        for (int b0 = 0; b0 < pad; b0 += 32) {
            int nb = (pad - b0) / 8 < 4 ? (pad - b0) / 8 : 4;
            __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
            const float *kc = kt + b0;
            for (int d = 0; d < dh; ++d, kc += pad) {
                __m256 qb = _mm256_broadcast_ss(qa + d);
                s0 = _mm256_fmadd_ps(qb, _mm256_loadu_ps(kc), s0);
                if (nb > 1)
                    s1 = _mm256_fmadd_ps(qb, _mm256_loadu_ps(kc + 8), s1);
                if (nb > 2)
                    s2 = _mm256_fmadd_ps(qb, _mm256_loadu_ps(kc + 16), s2);
                if (nb > 3)
                    s3 = _mm256_fmadd_ps(qb, _mm256_loadu_ps(kc + 24), s3);
            }
            __m256 s[4] = {s0, s1, s2, s3};
            for (int i = 0; i < nb; ++i)
                _mm256_storeu_ps(sc + b0 + 8 * i, _mm256_mul_ps(s[i], vscale));
        }
        float mx = sc[0];
        for (int b = 1; b < ls; ++b)
            mx = fmaxf(mx, sc[b]);
        const __m256 vmax = _mm256_set1_ps(mx);
        for (int b0 = 0; b0 < pad; b0 += 8)
            _mm256_storeu_ps(sc + b0, _ZGVdN8v_expf(_mm256_sub_ps(_mm256_loadu_ps(sc + b0), vmax)));
        float sum = 0;
        for (int b = 0; b < ls; ++b)
            sum += sc[b];
        const float inv = 1.0f / sum;
        float *ca = ctx + (size_t)a * ldc;
        int d0 = 0;
        for (; d0 + 32 <= dh; d0 += 32) {
            __m256 c0 = _mm256_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
            for (int b = 0; b < ls; ++b) {
                const float *vb = v + (size_t)b * ld + d0;
                __m256 pb = _mm256_set1_ps(sc[b] * inv);
                c0 = _mm256_fmadd_ps(pb, _mm256_loadu_ps(vb), c0);
                c1 = _mm256_fmadd_ps(pb, _mm256_loadu_ps(vb + 8), c1);
                c2 = _mm256_fmadd_ps(pb, _mm256_loadu_ps(vb + 16), c2);
                c3 = _mm256_fmadd_ps(pb, _mm256_loadu_ps(vb + 24), c3);
            }
            _mm256_storeu_ps(ca + d0, c0);
            _mm256_storeu_ps(ca + d0 + 8, c1);
            _mm256_storeu_ps(ca + d0 + 16, c2);
            _mm256_storeu_ps(ca + d0 + 24, c3);
        }
        for (; d0 + 8 <= dh; d0 += 8) {
            __m256 c0 = _mm256_setzero_ps();
            for (int b = 0; b < ls; ++b)
                c0 = _mm256_fmadd_ps(_mm256_set1_ps(sc[b] * inv), _mm256_loadu_ps(v + (size_t)b * ld + d0), c0);
            _mm256_storeu_ps(ca + d0, c0);
        }
        for (; d0 < dh; ++d0) {
            float c = 0;
            for (int b = 0; b < ls; ++b)
                c = fmaf(sc[b] * inv, v[(size_t)b * ld + d0], c);
            ca[d0] = c;
        }
    }
}
#endif /* SG_KERN_SIMD */

/* ---- dispatch ---- */

void sg_kern_f32_tile(int kern, const sg_kern_f32w_t *pw, const float *x, size_t ldx, size_t r0, size_t r1, int p0, int p1,
                      float *y, size_t ldy, int gelu)
{
    if (r0 >= r1 || p0 >= p1)
        return;
#if SG_KERN_SIMD
    if (kern == SG_KERN_AVX512 || kern == SG_KERN_AVX2) {
        f32_tile_simd(kern, pw, x, ldx, r0, r1, p0, p1, y, ldy, gelu);
        return;
    }
#endif
    (void)kern;
    f32_tile_scalar(pw, x, ldx, r0, r1, p0, p1, y, ldy, gelu);
}

void sg_kern_q8_quantize(int kern, const float *x, size_t ldx, int k, const sg_kern_q8w_t *qw, size_t r0, size_t r1,
                         sg_kern_q8x_t *qx, sg_kern_q8x_t *qx2)
{
    const float *mu = qw != NULL ? qw->mu : NULL;
    if (qx2 != NULL) {
        if (k > SG_KERN_Q8_SPLIT_MAX) /* the rows are prepared on the stack: a caller's bug, not data's */
            abort();
        const float *sign = qw != NULL ? qw->sign : NULL;
#if SG_KERN_SIMD
        if (kern == SG_KERN_VNNI || kern == SG_KERN_AVX512) {
            q8_quantize2_512(x, ldx, k, mu, sign, r0, r1, qx, qx2);
            return;
        }
        if (kern == SG_KERN_AVX2) {
            q8_quantize2_256(x, ldx, k, mu, sign, r0, r1, qx, qx2);
            return;
        }
#endif
        q8_quantize2_scalar(x, ldx, k, mu, sign, r0, r1, qx, qx2);
        return;
    }
    if (qw != NULL && qw->sign != NULL) {
#if SG_KERN_SIMD
        if (kern == SG_KERN_VNNI || kern == SG_KERN_AVX512) {
            q8_quantize_rot512(x, ldx, k, mu, qw->sign, r0, r1, qx);
            return;
        }
        if (kern == SG_KERN_AVX2) {
            q8_quantize_rot256(x, ldx, k, mu, qw->sign, r0, r1, qx);
            return;
        }
#endif
        q8_quantize_rot_scalar(x, ldx, k, mu, qw->sign, r0, r1, qx);
        return;
    }
#if SG_KERN_SIMD
    if (kern == SG_KERN_VNNI || kern == SG_KERN_AVX512) {
        q8_quantize_512(x, ldx, k, mu, r0, r1, qx);
        return;
    }
    if (kern == SG_KERN_AVX2) {
        q8_quantize_256(x, ldx, k, mu, r0, r1, qx);
        return;
    }
#endif
    (void)kern;
    q8_quantize_scalar(x, ldx, k, mu, r0, r1, qx);
}

void sg_kern_q8_tile(int kern, const sg_kern_q8w_t *qw, const sg_kern_q8x_t *qx, size_t r0, size_t r1, int p0, int p1, float *y,
                     size_t ldy, unsigned flags)
{
    if (r0 >= r1 || p0 >= p1)
        return;
#if SG_KERN_SIMD
    if (kern == SG_KERN_VNNI || kern == SG_KERN_AVX2) {
        q8_tile_simd(kern, qw, qx, r0, r1, p0, p1, y, ldy, flags);
        return;
    }
#endif
    (void)kern;
    q8_tile_scalar(qw, qx, r0, r1, p0, p1, y, ldy, flags);
}

void sg_kern_gelu(int kern, float *x, size_t n)
{
#if SG_KERN_SIMD
    if (kern >= SG_KERN_AVX512) {
        gelu_avx512(x, n);
        return;
    }
    if (kern == SG_KERN_AVX2) {
        gelu_avx2(x, n);
        return;
    }
#endif
    (void)kern;
    gelu_scalar(x, n);
}

void sg_kern_attention(int kern, const float *q, const float *k, const float *v, size_t ld, int ls, int dh, float scale, float *ctx,
                       size_t ldc, float *scratch)
{
#if SG_KERN_SIMD
    if (kern >= SG_KERN_AVX512) {
        attention_512(q, k, v, ld, ls, dh, scale, ctx, ldc, scratch);
        return;
    }
    if (kern == SG_KERN_AVX2) {
        attention_256(q, k, v, ld, ls, dh, scale, ctx, ldc, scratch);
        return;
    }
#endif
    (void)kern;
    attention_scalar(q, k, v, ld, ls, dh, scale, ctx, ldc, scratch);
}
