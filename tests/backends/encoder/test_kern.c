/*
 * test_kern.c -- the encoder's own kernels (backends/encoder/kern.h) on every kernel set this CPU
 * runs (SG_CPU_FEATURES narrows the list, as it narrows the choice at start-up):
 *
 *   - float32 products over packed weights: every kernel equals a double-precision reference to
 *     float rounding, the SIMD kernels give the scalar kernel's bits (one fused multiply-add chain
 *     per output, in k order), any cut into tiles gives the whole product's bits, and nothing is
 *     written past the layer's columns -- for shapes that are not multiples of the tiles;
 *   - int8: the quantised activations are the same bytes from every kernel and follow the rule
 *     (round to nearest even of x * 127 / max|x|); every kernel's products are the same floats,
 *     equal to a dequantised double reference computed here from the quantised operands, for 8-
 *     and 7-bit weights, including inputs whose products would saturate a u8 x s8 16-bit sum;
 *   - the epilogue that oneDNN's int32 results go through gives the tiles' floats;
 *   - centred and rotated int8 (inputs minus a centre, rotated in blocks of 64 with the weights
 *     rotated alike): the same bytes from every kernel, following the matrix form of the rotation,
 *     and a product much closer to float32's than plain int8 when the inputs share a large part;
 *   - inputs split into two int8 terms: the same bytes from every kernel, the first term the
 *     one-term bytes, the second the rest's; two tiles (the second adding) give the same floats
 *     from every kernel and from the oneDNN epilogue, with ~127 times less activation rounding;
 *   - fused attention equals a double-precision softmax(q k^T) v for lengths 1 .. 70 and several
 *     head sizes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "blas.h"
#include "kern.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t features(void)
{
    sg_cpu_t cpu;
    sg_cpu_read(&cpu);
    const char *mask = getenv("SG_CPU_FEATURES");
    char err[256];
    if (mask != NULL)
        assert_int_equal(sg_cpu_restrict(&cpu, mask, err, sizeof(err)), 0);
    return cpu.features;
}

static uint64_t rng = 88172645463325252ull;
static float frand(void) /* uniform in [-1, 1) */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 4503599627370496.0 - 1.0);
}

static double gelu_d(double v)
{
    return 0.5 * v * (1.0 + erf(v / sqrt(2.0)));
}

/* ---- float32 ---- */

static void check_f32_shape(int rows, int n, int k, uint32_t f)
{
    float *x = malloc(sizeof(float) * (size_t)rows * (size_t)k), *w = malloc(sizeof(float) * (size_t)n * (size_t)k);
    float *b = malloc(sizeof(float) * (size_t)n);
    const int ldy = n + 3; /* columns past n must stay untouched */
    float *y = malloc(sizeof(float) * (size_t)rows * ldy), *ys = malloc(sizeof(float) * (size_t)rows * ldy);
    for (int i = 0; i < rows * k; ++i)
        x[i] = frand();
    for (int i = 0; i < n * k; ++i)
        w[i] = frand() * 0.2f;
    for (int i = 0; i < n; ++i)
        b[i] = frand();
    /* two parts stacked, as Q/K/V are */
    int n1 = n / 3, ns[2] = {n1, n - n1};
    const float *ws[2] = {w, w + (size_t)n1 * (size_t)k}, *bs[2] = {b, b + n1};
    sg_kern_f32w_t pw;
    assert_int_equal(sg_kern_f32_pack(&pw, 2, ws, bs, ns, k), 0);
    assert_int_equal(pw.n, n);
    for (int gelu = 0; gelu < 2; ++gelu) {
        for (int kern = SG_KERN_SCALAR; kern <= SG_KERN_AVX512; ++kern) {
            if (!sg_kern_runs(kern, 0, f))
                continue;
            for (int i = 0; i < rows * ldy; ++i)
                y[i] = -7.0f;
            sg_kern_f32_tile(kern, &pw, x, (size_t)k, 0, (size_t)rows, 0, pw.np, y, (size_t)ldy, gelu);
            for (int r = 0; r < rows; ++r) {
                for (int j = 0; j < n; ++j) {
                    double acc = b[j];
                    for (int kk = 0; kk < k; ++kk)
                        acc += (double)x[r * k + kk] * w[(size_t)j * k + kk];
                    double want = gelu ? gelu_d(acc) : acc;
                    assert_true(fabs(y[r * ldy + j] - want) <= 1e-5 * (1.0 + fabs(want)));
                }
                for (int j = n; j < ldy; ++j)
                    assert_true(y[r * ldy + j] == -7.0f);
            }
            if (kern == SG_KERN_SCALAR) {
                memcpy(ys, y, sizeof(float) * (size_t)rows * ldy);
            } else if (!gelu) { /* the same chain of fused multiply-adds: the same bits */
                assert_memory_equal(y, ys, sizeof(float) * (size_t)rows * ldy);
            }
            /* tiles of any shape give the whole product's bits */
            float *yt = malloc(sizeof(float) * (size_t)rows * ldy);
            memcpy(yt, y, sizeof(float) * (size_t)rows * ldy);
            for (int i = 0; i < rows * ldy; ++i)
                if (i % ldy < n)
                    y[i] = -7.0f;
            for (int r0 = 0; r0 < rows; r0 += 5)
                for (int p0 = 0; p0 < pw.np; p0 += 3)
                    sg_kern_f32_tile(kern, &pw, x, (size_t)k, (size_t)r0, (size_t)(r0 + 5 < rows ? r0 + 5 : rows), p0,
                                     p0 + 3 < pw.np ? p0 + 3 : pw.np, y, (size_t)ldy, gelu);
            assert_memory_equal(y, yt, sizeof(float) * (size_t)rows * ldy);
            free(yt);
        }
    }
    sg_kern_f32_free(&pw);
    free(x);
    free(w);
    free(b);
    free(y);
    free(ys);
}

static void test_f32_products(void **state)
{
    (void)state;
    uint32_t f = features();
    static const int shapes[][3] = {{1, 16, 16}, {6, 64, 32}, {7, 70, 33}, {13, 5, 3}, {25, 130, 100}, {2, 200, 1}, {12, 48, 768}};
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); ++i)
        check_f32_shape(shapes[i][0], shapes[i][1], shapes[i][2], f);
    fprintf(stderr, "float32 kernels run here:%s%s%s\n", " scalar", sg_kern_runs(SG_KERN_AVX2, 0, f) ? " avx2" : "",
            sg_kern_runs(SG_KERN_AVX512, 0, f) ? " avx512" : "");
}

/* ---- int8 ---- */

static const int q8_kernels[] = {SG_KERN_SCALAR, SG_KERN_AVX2, SG_KERN_VNNI};

static void test_q8_quantize(void **state)
{
    (void)state;
    uint32_t f = features();
    static const int ks[] = {1, 3, 4, 17, 64, 100};
    for (size_t ki = 0; ki < sizeof(ks) / sizeof(ks[0]); ++ki) {
        int k = ks[ki], rows = 9;
        float *x = malloc(sizeof(float) * (size_t)rows * (size_t)k);
        for (int i = 0; i < rows * k; ++i)
            x[i] = frand() * (float)(1 + i % 5);
        for (int i = 0; i < k; ++i) /* an all-zero row */
            x[3 * k + i] = 0.0f;
        x[5 * k] = 127.0f; /* a row of exact ties (127 / max = 1): 2.5 -> 2, -1.5 -> -2, 3.5 -> 4 */
        for (int i = 1; i < k; ++i)
            x[5 * k + i] = (float)((i % 7) - 3) + 0.5f;
        sg_kern_q8x_t ref = {0}, got = {0};
        assert_int_equal(sg_kern_q8x_reserve(&ref, (size_t)rows, k), 0);
        assert_int_equal(sg_kern_q8x_reserve(&got, (size_t)rows, k), 0);
        sg_kern_q8_quantize(SG_KERN_SCALAR, x, (size_t)k, k, NULL, 0, (size_t)rows, &ref, NULL);
        for (int r = 0; r < rows; ++r) {
            float mx = 0;
            for (int i = 0; i < k; ++i)
                mx = fmaxf(mx, fabsf(x[r * k + i]));
            assert_true(ref.scale[r] == mx / 127.0f);
            for (int i = 0; i < ref.kp; ++i) {
                int want = i < k && mx > 0 ? (int)nearbyintf(x[r * k + i] * (127.0f / mx)) : 0;
                assert_int_equal(ref.s[(size_t)r * ref.kp + i], want);
                assert_int_equal(ref.u[(size_t)r * ref.kp + i], want + 128);
            }
        }
        for (size_t i = 1; i < sizeof(q8_kernels) / sizeof(q8_kernels[0]); ++i) {
            if (!sg_kern_runs(q8_kernels[i], 1, f))
                continue;
            memset(got.s, 0x55, (size_t)rows * (size_t)got.kp);
            memset(got.u, 0x55, (size_t)rows * (size_t)got.kp);
            sg_kern_q8_quantize(q8_kernels[i], x, (size_t)k, k, NULL, 0, (size_t)rows, &got, NULL);
            assert_memory_equal(got.s, ref.s, (size_t)rows * (size_t)ref.kp);
            assert_memory_equal(got.u, ref.u, (size_t)rows * (size_t)ref.kp);
            assert_memory_equal(got.scale, ref.scale, sizeof(float) * (size_t)rows);
        }
        sg_kern_q8x_free(&ref);
        sg_kern_q8x_free(&got);
        free(x);
    }
}

static void check_q8_shape(int rows, int n, int k, int bits, int extreme, uint32_t f)
{
    float *x = malloc(sizeof(float) * (size_t)rows * (size_t)k), *w = malloc(sizeof(float) * (size_t)n * (size_t)k);
    float *b = malloc(sizeof(float) * (size_t)n);
    for (int i = 0; i < rows * k; ++i)
        x[i] = extreme ? (i % 2 ? 1.0f : -1.0f) : frand();
    for (int i = 0; i < n * k; ++i)
        w[i] = extreme ? (i % 3 ? 1.0f : -1.0f) : frand();
    for (int i = 0; i < n; ++i)
        b[i] = frand();
    const float *ws[1] = {w}, *bs[1] = {b};
    sg_kern_q8w_t qw;
    assert_int_equal(sg_kern_q8_pack(&qw, 1, ws, bs, &n, k, bits, NULL, 0), 0);
    assert_int_equal(qw.bits, bits);
    sg_kern_q8x_t qx = {0};
    assert_int_equal(sg_kern_q8x_reserve(&qx, (size_t)rows, k), 0);
    sg_kern_q8_quantize(SG_KERN_SCALAR, x, (size_t)k, k, NULL, 0, (size_t)rows, &qx, NULL);
    const int ldy = n + 2, levels = bits == 7 ? 63 : 127;
    float *y = malloc(sizeof(float) * (size_t)rows * ldy), *y0 = malloc(sizeof(float) * (size_t)rows * ldy);
    int first = 1;
    for (int gelu = 0; gelu < 2; ++gelu) {
        first = 1;
        for (size_t ki = 0; ki < sizeof(q8_kernels) / sizeof(q8_kernels[0]); ++ki) {
            int kern = q8_kernels[ki];
            if (!sg_kern_runs(kern, 1, f))
                continue;
            for (int i = 0; i < rows * ldy; ++i)
                y[i] = -7.0f;
            sg_kern_q8_tile(kern, &qw, &qx, 0, (size_t)rows, 0, qw.np, y, (size_t)ldy, gelu);
            for (int r = 0; r < rows; ++r) {
                for (int j = 0; j < n; ++j) {
                    /* the weights as quantised: the rule, checked here, then the dequantised sum */
                    float mx = 0;
                    for (int kk = 0; kk < k; ++kk)
                        mx = fmaxf(mx, fabsf(w[(size_t)j * k + kk]));
                    double acc = 0;
                    for (int kk = 0; kk < k; ++kk) {
                        int q = sg_kern_q8_weight(&qw, j, kk);
                        assert_int_equal(q, (int)nearbyintf(w[(size_t)j * k + kk] * ((float)levels / mx)));
                        acc += (double)qx.s[(size_t)r * qx.kp + kk] * qx.scale[r] * ((double)q * qw.scale[j]);
                    }
                    acc += b[j];
                    double want = gelu ? gelu_d(acc) : acc;
                    assert_true(fabs(y[r * ldy + j] - want) <= 2e-5 * (1.0 + fabs(want)));
                }
                for (int j = n; j < ldy; ++j)
                    assert_true(y[r * ldy + j] == -7.0f);
            }
            if (first)
                memcpy(y0, y, sizeof(float) * (size_t)rows * ldy);
            else if (!gelu) /* the same int32 sums and the same epilogue: the same floats */
                assert_memory_equal(y, y0, sizeof(float) * (size_t)rows * ldy);
            first = 0;
        }
        /* oneDNN's path: int32 sums of (q_x + 128) q_w in y's bytes, then the epilogue */
        for (int r = 0; r < rows; ++r) {
            for (int j = 0; j < n; ++j) {
                int32_t acc = 0;
                for (int kk = 0; kk < qx.kp; ++kk)
                    acc += (int32_t)qx.u[(size_t)r * qx.kp + kk] * (kk < k ? sg_kern_q8_weight(&qw, j, kk) : 0);
                memcpy(&y[r * ldy + j], &acc, sizeof(acc));
            }
        }
        sg_kern_q8_epilogue(&qw, &qx, 0, (size_t)rows, 0, n, NULL, 0, y, (size_t)ldy, gelu);
        for (int r = 0; r < rows; ++r)
            for (int j = 0; j < n; ++j)
                assert_true(gelu ? fabsf(y[r * ldy + j] - y0[r * ldy + j]) <= 1e-6f * (1.0f + fabsf(y0[r * ldy + j]))
                                 : y[r * ldy + j] == y0[r * ldy + j]);
    }
    sg_kern_q8_free(&qw);
    sg_kern_q8x_free(&qx);
    free(x);
    free(w);
    free(b);
    free(y);
    free(y0);
}

static void test_q8_products(void **state)
{
    (void)state;
    uint32_t f = features();
    static const int shapes[][3] = {{1, 16, 4}, {6, 64, 32}, {7, 70, 33}, {13, 5, 3}, {25, 130, 100}, {5, 48, 768}, {4, 20, 3072}};
    for (int bits = 8; bits >= 7; --bits)
        for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); ++i)
            check_q8_shape(shapes[i][0], shapes[i][1], shapes[i][2], bits, 0, f);
    /* every |x| and |w| at the top of its range: u8 x s8 pairs of 2 * 255 * 127 would saturate */
    check_q8_shape(5, 33, 256, 8, 1, f);
    check_q8_shape(5, 33, 256, 7, 1, f);
    fprintf(stderr, "int8 kernels run here: scalar%s%s\n", sg_kern_runs(SG_KERN_AVX2, 1, f) ? " avx2" : "",
            sg_kern_runs(SG_KERN_VNNI, 1, f) ? " avx512-vnni" : "");
}

/* kern.h's rotation written out as a matrix: v'[i] = sum_j (-1)^popcount(i & j) D[j] v[j] / 8 per
 * block of 64, with D[j] = -1 where bit 0 of murmur3's finaliser of the position is set */
static double ref_rotated(const double *c, int kk)
{
    int blk = kk / 64 * 64, i = kk % 64;
    double acc = 0;
    for (int j = 0; j < 64; ++j) {
        uint32_t h = (uint32_t)(blk + j);
        h ^= h >> 16;
        h *= 0x85ebca6bu;
        h ^= h >> 13;
        h *= 0xc2b2ae35u;
        h ^= h >> 16;
        acc += (__builtin_popcount((unsigned)(i & j)) % 2 ? -1.0 : 1.0) * ((h & 1) ? -1.0 : 1.0) * c[blk + j];
    }
    return acc / 8;
}

/* Centred and rotated products (kern.h): every kernel quantises x - mu, rotated, to the same bytes,
 * which follow the matrix form of the rotation (a step at most where float32 and double round to
 * either side of an edge); every kernel's product is the same floats; and with inputs that share
 * a large common part, the product is far closer to x . W^T + b with the centre than without. */
static void check_q8_centred(int rows, int n, int k, uint32_t f)
{
    float *x = malloc(sizeof(float) * (size_t)rows * (size_t)k), *w = malloc(sizeof(float) * (size_t)n * (size_t)k);
    float *b = malloc(sizeof(float) * (size_t)n), *mu = malloc(sizeof(float) * (size_t)k);
    for (int i = 0; i < k; ++i)
        mu[i] = 4.0f * frand();
    for (int i = 0; i < rows * k; ++i)
        x[i] = mu[i % k] + 0.1f * frand() + (i % 97 == 0 ? 0.5f : 0.0f); /* a shared part, a little of its own */
    for (int i = 0; i < n * k; ++i)
        w[i] = frand();
    for (int i = 0; i < n; ++i)
        b[i] = frand();
    const float *ws[1] = {w}, *bs[1] = {b};
    sg_kern_q8w_t qw, plain;
    assert_int_equal(sg_kern_q8_pack(&qw, 1, ws, bs, &n, k, 8, mu, 1), 0);
    assert_int_equal(sg_kern_q8_pack(&plain, 1, ws, bs, &n, k, 8, NULL, 0), 0);
    assert_true((qw.sign != NULL) == (k % SG_KERN_ROT == 0));
    sg_kern_q8x_t ref = {0}, got = {0}, px = {0};
    assert_int_equal(sg_kern_q8x_reserve(&ref, (size_t)rows, k), 0);
    assert_int_equal(sg_kern_q8x_reserve(&got, (size_t)rows, k), 0);
    assert_int_equal(sg_kern_q8x_reserve(&px, (size_t)rows, k), 0);
    sg_kern_q8_quantize(SG_KERN_SCALAR, x, (size_t)k, k, &qw, 0, (size_t)rows, &ref, NULL);
    sg_kern_q8_quantize(SG_KERN_SCALAR, x, (size_t)k, k, &plain, 0, (size_t)rows, &px, NULL);
    double *c = malloc(sizeof(double) * (size_t)k), *cr = malloc(sizeof(double) * (size_t)k);
    size_t off = 0;
    for (int r = 0; r < rows; ++r) {
        double mx = 0;
        for (int i = 0; i < k; ++i)
            c[i] = (double)(x[r * k + i] - mu[i]);
        for (int i = 0; i < k; ++i)
            mx = fmax(mx, fabs(cr[i] = qw.sign != NULL ? ref_rotated(c, i) : c[i]));
        assert_true(fabs(ref.scale[r] - mx / 127) <= 1e-5 * mx);
        for (int i = 0; i < k; ++i) {
            int want = (int)nearbyint(cr[i] * 127 / mx), q = ref.s[(size_t)r * ref.kp + i];
            assert_true(abs(q - want) <= 1);
            off += q != want;
        }
    }
    assert_true(off * 100 <= (size_t)rows * (size_t)k); /* edges are rare */
    for (size_t i = 1; i < sizeof(q8_kernels) / sizeof(q8_kernels[0]); ++i) {
        if (!sg_kern_runs(q8_kernels[i], 1, f))
            continue;
        memset(got.s, 0x55, (size_t)rows * (size_t)got.kp);
        memset(got.u, 0x55, (size_t)rows * (size_t)got.kp);
        sg_kern_q8_quantize(q8_kernels[i], x, (size_t)k, k, &qw, 0, (size_t)rows, &got, NULL);
        assert_memory_equal(got.s, ref.s, (size_t)rows * (size_t)ref.kp);
        assert_memory_equal(got.u, ref.u, (size_t)rows * (size_t)ref.kp);
        assert_memory_equal(got.scale, ref.scale, sizeof(float) * (size_t)rows);
    }
    float *y = malloc(sizeof(float) * (size_t)rows * (size_t)n), *y0 = malloc(sizeof(float) * (size_t)rows * (size_t)n);
    float *yp = malloc(sizeof(float) * (size_t)rows * (size_t)n);
    int first = 1;
    for (size_t ki = 0; ki < sizeof(q8_kernels) / sizeof(q8_kernels[0]); ++ki) {
        if (!sg_kern_runs(q8_kernels[ki], 1, f))
            continue;
        sg_kern_q8_tile(q8_kernels[ki], &qw, &ref, 0, (size_t)rows, 0, qw.np, y, (size_t)n, 0);
        if (first)
            memcpy(y0, y, sizeof(float) * (size_t)rows * (size_t)n);
        else
            assert_memory_equal(y, y0, sizeof(float) * (size_t)rows * (size_t)n);
        first = 0;
    }
    sg_kern_q8_tile(SG_KERN_SCALAR, &plain, &px, 0, (size_t)rows, 0, plain.np, yp, (size_t)n, 0);
    double err = 0, err_plain = 0, norm = 0;
    for (int r = 0; r < rows; ++r) {
        for (int j = 0; j < n; ++j) {
            double want = b[j];
            for (int i = 0; i < k; ++i)
                want += (double)x[r * k + i] * w[(size_t)j * k + i];
            err += (y0[r * n + j] - want) * (y0[r * n + j] - want);
            err_plain += (yp[r * n + j] - want) * (yp[r * n + j] - want);
            norm += want * want;
        }
    }
    fprintf(stderr, "int8 k %d: relative error %.2e centred%s, %.2e plain\n", k, sqrt(err / norm), qw.sign ? " and rotated" : "",
            sqrt(err_plain / norm));
    assert_true(err * 25 < err_plain); /* the shared part no longer meets the quantised weights */
    sg_kern_q8_free(&qw);
    sg_kern_q8_free(&plain);
    sg_kern_q8x_free(&ref);
    sg_kern_q8x_free(&got);
    sg_kern_q8x_free(&px);
    free(x);
    free(w);
    free(b);
    free(mu);
    free(c);
    free(cr);
    free(y);
    free(y0);
    free(yp);
}

/* Two terms (kern.h): every kernel splits the rows into the same two sets of bytes, the first the
 * one-term quantisation, the second the rest c - q1 s1 quantised (its matrix-form reference: a
 * step at most, rarely); the product as two tiles (the second with SG_KERN_Q8_ADD) is the same
 * floats from every kernel and from the oneDNN epilogue, and carries far less of the activations'
 * rounding than one term (against the product of the quantised weights with the exact input). */
static void check_q8_split(int rows, int n, int k, int rotate, uint32_t f)
{
    float *x = malloc(sizeof(float) * (size_t)rows * (size_t)k), *w = malloc(sizeof(float) * (size_t)n * (size_t)k);
    float *b = malloc(sizeof(float) * (size_t)n), *mu = malloc(sizeof(float) * (size_t)k);
    for (int i = 0; i < k; ++i)
        mu[i] = frand();
    for (int i = 0; i < rows * k; ++i)
        x[i] = mu[i % k] + frand() * (i % 13 == 0 ? 3.0f : 1.0f);
    for (int i = 0; i < n * k; ++i)
        w[i] = frand();
    for (int i = 0; i < n; ++i)
        b[i] = frand();
    const float *ws[1] = {w}, *bs[1] = {b};
    sg_kern_q8w_t qw;
    assert_int_equal(sg_kern_q8_pack(&qw, 1, ws, bs, &n, k, 8, mu, rotate), 0);
    sg_kern_q8x_t one = {0}, q1 = {0}, q2 = {0}, g1 = {0}, g2 = {0};
    assert_int_equal(sg_kern_q8x_reserve(&one, (size_t)rows, k), 0);
    assert_int_equal(sg_kern_q8x_reserve(&q1, (size_t)rows, k), 0);
    assert_int_equal(sg_kern_q8x_reserve(&q2, (size_t)rows, k), 0);
    assert_int_equal(sg_kern_q8x_reserve(&g1, (size_t)rows, k), 0);
    assert_int_equal(sg_kern_q8x_reserve(&g2, (size_t)rows, k), 0);
    sg_kern_q8_quantize(SG_KERN_SCALAR, x, (size_t)k, k, &qw, 0, (size_t)rows, &one, NULL);
    sg_kern_q8_quantize(SG_KERN_SCALAR, x, (size_t)k, k, &qw, 0, (size_t)rows, &q1, &q2);
    assert_memory_equal(q1.s, one.s, (size_t)rows * (size_t)one.kp); /* the first term is the one-term quantisation */
    assert_memory_equal(q1.scale, one.scale, sizeof(float) * (size_t)rows);
    double *c = malloc(sizeof(double) * (size_t)k), *e = malloc(sizeof(double) * (size_t)k);
    size_t off = 0;
    for (int r = 0; r < rows; ++r) {
        for (int i = 0; i < k; ++i)
            c[i] = (double)(x[r * k + i] - mu[i]);
        double mx = 0;
        for (int i = 0; i < k; ++i) {
            double ci = qw.sign != NULL ? ref_rotated(c, i) : c[i];
            e[i] = ci - (double)q1.s[(size_t)r * q1.kp + i] * q1.scale[r];
            mx = fmax(mx, fabs(e[i]));
        }
        assert_true(q2.scale[r] <= q1.scale[r] * 0.51f / 127.0f * 1.01f + 1e-30f); /* the rest is at most half a step */
        for (int i = 0; i < k; ++i) {
            int want = (int)nearbyint(e[i] * 127 / mx), q = q2.s[(size_t)r * q2.kp + i];
            assert_true(abs(q - want) <= 1);
            off += q != want;
        }
    }
    assert_true(off * 20 <= (size_t)rows * (size_t)k); /* its edges are ~254 times denser than the first term's: rare still */
    for (size_t i = 1; i < sizeof(q8_kernels) / sizeof(q8_kernels[0]); ++i) {
        if (!sg_kern_runs(q8_kernels[i], 1, f))
            continue;
        memset(g2.s, 0x55, (size_t)rows * (size_t)g2.kp);
        sg_kern_q8_quantize(q8_kernels[i], x, (size_t)k, k, &qw, 0, (size_t)rows, &g1, &g2);
        assert_memory_equal(g1.u, q1.u, (size_t)rows * (size_t)q1.kp);
        assert_memory_equal(g2.s, q2.s, (size_t)rows * (size_t)q2.kp);
        assert_memory_equal(g2.u, q2.u, (size_t)rows * (size_t)q2.kp);
        assert_memory_equal(g2.scale, q2.scale, sizeof(float) * (size_t)rows);
    }
    const size_t ny = (size_t)rows * (size_t)n;
    float *y = malloc(sizeof(float) * ny), *y0 = malloc(sizeof(float) * ny), *y1 = malloc(sizeof(float) * ny);
    int first = 1;
    for (size_t ki = 0; ki < sizeof(q8_kernels) / sizeof(q8_kernels[0]); ++ki) {
        if (!sg_kern_runs(q8_kernels[ki], 1, f))
            continue;
        for (int gelu = 0; gelu < 2; ++gelu) {
            sg_kern_q8_tile(q8_kernels[ki], &qw, &q1, 0, (size_t)rows, 0, qw.np, y, (size_t)n, 0);
            sg_kern_q8_tile(q8_kernels[ki], &qw, &q2, 0, (size_t)rows, 0, qw.np, y, (size_t)n,
                            SG_KERN_Q8_ADD | (gelu ? SG_KERN_Q8_GELU : 0));
            if (gelu)
                continue;
            if (first)
                memcpy(y0, y, sizeof(float) * ny);
            else
                assert_memory_equal(y, y0, sizeof(float) * ny);
            first = 0;
        }
    }
    /* oneDNN's path: the first term's sums in y's bytes, the second's beside, both through the epilogue */
    int32_t *acc = malloc(sizeof(int32_t) * ny);
    for (int r = 0; r < rows; ++r) {
        for (int j = 0; j < n; ++j) {
            int32_t a1 = 0, a2 = 0;
            for (int kk = 0; kk < q1.kp; ++kk) {
                a1 += (int32_t)q1.u[(size_t)r * q1.kp + kk] * sg_kern_q8_weight(&qw, j, kk);
                a2 += (int32_t)q2.u[(size_t)r * q2.kp + kk] * sg_kern_q8_weight(&qw, j, kk);
            }
            memcpy(&y[(size_t)r * n + j], &a1, sizeof(a1));
            acc[(size_t)r * n + j] = a2;
        }
    }
    sg_kern_q8_epilogue(&qw, &q1, 0, (size_t)rows, 0, n, NULL, 0, y, (size_t)n, 0);
    sg_kern_q8_epilogue(&qw, &q2, 0, (size_t)rows, 0, n, acc, (size_t)n, y, (size_t)n, SG_KERN_Q8_ADD);
    assert_memory_equal(y, y0, sizeof(float) * ny);
    /* against the quantised weights times the exact (centred, rotated) input: one term vs two */
    sg_kern_q8_tile(SG_KERN_SCALAR, &qw, &one, 0, (size_t)rows, 0, qw.np, y1, (size_t)n, 0);
    double err1 = 0, err2 = 0;
    for (int r = 0; r < rows; ++r) {
        for (int i = 0; i < k; ++i)
            c[i] = (double)(x[r * k + i] - mu[i]);
        for (int i = 0; i < k; ++i)
            e[i] = qw.sign != NULL ? ref_rotated(c, i) : c[i];
        for (int j = 0; j < n; ++j) {
            double want = qw.b[j];
            for (int i = 0; i < k; ++i)
                want += e[i] * (double)sg_kern_q8_weight(&qw, j, i) * qw.scale[j];
            err1 += (y1[(size_t)r * n + j] - want) * (y1[(size_t)r * n + j] - want);
            err2 += (y0[(size_t)r * n + j] - want) * (y0[(size_t)r * n + j] - want);
        }
    }
    fprintf(stderr, "int8 k %d%s: the activations' rounding in the product %.2e with one term, %.2e with two\n", k,
            rotate ? " rotated" : "", sqrt(err1), sqrt(err2));
    assert_true(err2 * 1e4 < err1); /* about 127 times finer: 1/16000 of the squared error */
    sg_kern_q8_free(&qw);
    sg_kern_q8x_free(&one);
    sg_kern_q8x_free(&q1);
    sg_kern_q8x_free(&q2);
    sg_kern_q8x_free(&g1);
    sg_kern_q8x_free(&g2);
    free(x);
    free(w);
    free(b);
    free(mu);
    free(c);
    free(e);
    free(y);
    free(y0);
    free(y1);
    free(acc);
}

static void test_q8_split(void **state)
{
    (void)state;
    uint32_t f = features();
    check_q8_split(7, 40, 64, 1, f);
    check_q8_split(5, 33, 3072, 1, f);
    check_q8_split(6, 17, 100, 0, f);
    check_q8_split(3, 20, 768, 0, f);
}

static void test_q8_centred_rotated(void **state)
{
    (void)state;
    uint32_t f = features();
    check_q8_centred(7, 40, 64, f);
    check_q8_centred(5, 33, 768, f);
    check_q8_centred(3, 20, 3072, f);
    check_q8_centred(6, 17, 100, f); /* not a multiple of 64: centred, not rotated */
}

static void test_kernel_choice(void **state)
{
    (void)state;
    uint32_t avx2 = SG_CPU_SSE3 | SG_CPU_AVX | SG_CPU_FMA | SG_CPU_AVX2;
    uint32_t avx512 = avx2 | SG_CPU_AVX512F | SG_CPU_AVX512BW | SG_CPU_AVX512DQ | SG_CPU_AVX512VL;
    assert_int_equal(sg_kern_f32_best(SG_CPU_SSE3 | SG_CPU_AVX), SG_KERN_NONE);
    assert_int_equal(sg_kern_q8_best(SG_CPU_SSE3 | SG_CPU_AVX), SG_KERN_SCALAR);
    assert_int_equal(sg_kern_f32_best(avx2), SG_KERN_AVX2);
    assert_int_equal(sg_kern_q8_best(avx2), SG_KERN_AVX2);
    assert_int_equal(sg_kern_f32_best(avx512), SG_KERN_AVX512);
    assert_int_equal(sg_kern_q8_best(avx512), SG_KERN_AVX2); /* AVX-512 without VNNI: the AVX2 int8 kernel */
    assert_int_equal(sg_kern_q8_best(avx512 | SG_CPU_AVX512_VNNI), SG_KERN_VNNI);
    assert_int_equal(sg_kern_f32_best(avx512 | SG_CPU_AVX512_VNNI), SG_KERN_AVX512);
    assert_false(sg_kern_runs(SG_KERN_VNNI, 0, avx512 | SG_CPU_AVX512_VNNI)); /* not a float32 kernel */
    assert_string_equal(sg_kern_name(SG_KERN_VNNI), "avx512-vnni");
    assert_string_equal(sg_kern_name(SG_KERN_NONE), "blas");
}

/* ---- attention ---- */

static void test_attention(void **state)
{
    (void)state;
    uint32_t f = features();
    static const int dhs[] = {16, 64, 20, 8, 100};
    static const int lss[] = {1, 2, 7, 16, 17, 33, 64, 70};
    for (size_t di = 0; di < sizeof(dhs) / sizeof(dhs[0]); ++di) {
        for (size_t li = 0; li < sizeof(lss) / sizeof(lss[0]); ++li) {
            int dh = dhs[di], ls = lss[li];
            size_t ld = (size_t)dh * 3 + 5, ldc = (size_t)dh + 3;
            float *qkv = malloc(sizeof(float) * (size_t)ls * ld), *ctx = malloc(sizeof(float) * (size_t)ls * ldc);
            float *scratch = malloc(sizeof(float) * sg_kern_attention_scratch(ls, dh));
            for (size_t i = 0; i < (size_t)ls * ld; ++i)
                qkv[i] = frand() * 2.0f;
            const float *q = qkv, *k = qkv + dh, *v = qkv + 2 * dh;
            float scale = 1.0f / sqrtf((float)dh);
            for (int kern = SG_KERN_SCALAR; kern <= SG_KERN_AVX512; ++kern) {
                if (!sg_kern_runs(kern, 0, f))
                    continue;
                for (size_t i = 0; i < (size_t)ls * ldc; ++i)
                    ctx[i] = -7.0f;
                sg_kern_attention(kern, q, k, v, ld, ls, dh, scale, ctx, ldc, scratch);
                for (int a = 0; a < ls; ++a) {
                    double s[70], mx = -INFINITY, sum = 0;
                    for (int b = 0; b < ls; ++b) {
                        double d = 0;
                        for (int i = 0; i < dh; ++i)
                            d += (double)q[a * ld + i] * k[b * ld + i];
                        s[b] = d * scale;
                        mx = fmax(mx, s[b]);
                    }
                    for (int b = 0; b < ls; ++b)
                        sum += (s[b] = exp(s[b] - mx));
                    for (int i = 0; i < dh; ++i) {
                        double want = 0;
                        for (int b = 0; b < ls; ++b)
                            want += s[b] / sum * v[b * ld + i];
                        assert_true(fabs(ctx[a * ldc + i] - want) <= 2e-6 * (1.0 + fabs(want)));
                    }
                    for (size_t i = (size_t)dh; i < ldc; ++i)
                        assert_true(ctx[a * ldc + i] == -7.0f);
                }
            }
            free(qkv);
            free(ctx);
            free(scratch);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernel_choice), cmocka_unit_test(test_f32_products),       cmocka_unit_test(test_q8_quantize),
        cmocka_unit_test(test_q8_products),   cmocka_unit_test(test_q8_centred_rotated), cmocka_unit_test(test_q8_split),
        cmocka_unit_test(test_attention),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
