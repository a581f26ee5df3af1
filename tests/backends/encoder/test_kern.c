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
        sg_kern_q8_quantize(SG_KERN_SCALAR, x, (size_t)k, k, 0, (size_t)rows, &ref);
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
            sg_kern_q8_quantize(q8_kernels[i], x, (size_t)k, k, 0, (size_t)rows, &got);
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
    assert_int_equal(sg_kern_q8_pack(&qw, 1, ws, bs, &n, k, bits), 0);
    assert_int_equal(qw.bits, bits);
    sg_kern_q8x_t qx = {0};
    assert_int_equal(sg_kern_q8x_reserve(&qx, (size_t)rows, k), 0);
    sg_kern_q8_quantize(SG_KERN_SCALAR, x, (size_t)k, k, 0, (size_t)rows, &qx);
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
        sg_kern_q8_epilogue(&qw, &qx, 0, (size_t)rows, 0, n, y, (size_t)ldy, gelu);
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
        cmocka_unit_test(test_kernel_choice), cmocka_unit_test(test_f32_products), cmocka_unit_test(test_q8_quantize),
        cmocka_unit_test(test_q8_products),   cmocka_unit_test(test_attention),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
