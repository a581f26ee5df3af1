/*
 * test_blas.c -- the BLAS kernel decision (lib/blas.c): feature sets in, choice out.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "blas.h"

#define AVX2_SET (SG_CPU_SSE3 | SG_CPU_AVX | SG_CPU_FMA | SG_CPU_AVX2)
#define AVX512_SET (AVX2_SET | SG_CPU_AVX512F | SG_CPU_AVX512BW | SG_CPU_AVX512DQ | SG_CPU_AVX512VL)

static sg_cpu_t cpu(const char *vendor, unsigned family, unsigned model, uint32_t features)
{
    sg_cpu_t c;
    memset(&c, 0, sizeof(c));
    snprintf(c.vendor, sizeof(c.vendor), "%s", vendor);
    c.family = family;
    c.model = model;
    c.detected = c.features = features;
    return c;
}

static void test_best_core_by_features(void **state)
{
    (void)state;
    sg_cpu_t c = cpu("GenuineIntel", 6, 207, AVX512_SET | SG_CPU_AVX512_BF16 | SG_CPU_AMX_TILE | SG_CPU_AMX_BF16);
    assert_string_equal(sg_blas_best_core(&c), "Cooperlake");
    c = cpu("GenuineIntel", 6, 85, AVX512_SET);
    assert_string_equal(sg_blas_best_core(&c), "SkylakeX");
    c = cpu("GenuineIntel", 6, 63, AVX2_SET);
    assert_string_equal(sg_blas_best_core(&c), "Haswell");
    c = cpu("AuthenticAMD", 25, 1, AVX2_SET);
    assert_string_equal(sg_blas_best_core(&c), "Zen");
    c = cpu("HygonGenuine", 24, 0, AVX2_SET);
    assert_string_equal(sg_blas_best_core(&c), "Zen");
    c = cpu("AuthenticAMD", 25, 17, AVX512_SET | SG_CPU_AVX512_BF16); /* Zen 4 */
    assert_string_equal(sg_blas_best_core(&c), "Cooperlake");
    c = cpu("GenuineIntel", 6, 42, SG_CPU_SSE3 | SG_CPU_AVX);
    assert_string_equal(sg_blas_best_core(&c), "Sandybridge");
    c = cpu("GenuineIntel", 6, 26, SG_CPU_SSE3);
    assert_null(sg_blas_best_core(&c));
    /* AVX-512 without all of F/BW/DQ/VL (Knights Landing) is not SkylakeX */
    c = cpu("GenuineIntel", 6, 87, AVX2_SET | SG_CPU_AVX512F);
    assert_string_equal(sg_blas_best_core(&c), "Haswell");
}

static void test_core_rank(void **state)
{
    (void)state;
    assert_int_equal(sg_blas_core_rank("Prescott"), 1);
    assert_int_equal(sg_blas_core_rank("Sandybridge"), 2);
    assert_int_equal(sg_blas_core_rank("Haswell"), 3);
    assert_int_equal(sg_blas_core_rank("Zen"), 3);
    assert_int_equal(sg_blas_core_rank("SkylakeX"), 4);
    assert_int_equal(sg_blas_core_rank("skylakex"), 4);
    assert_int_equal(sg_blas_core_rank("Cooperlake"), 5);
    assert_int_equal(sg_blas_core_rank("NewCore2030"), -1);
    assert_int_equal(sg_blas_core_rank(NULL), -1);
}

/* the machine: a Xeon model OpenBLAS 0.3.21 does not know gets Prescott */
static void test_unknown_xeon_is_forced(void **state)
{
    (void)state;
    sg_cpu_t c = cpu("GenuineIntel", 6, 207, AVX512_SET | SG_CPU_AVX512_BF16);
    sg_blas_choice_t ch;
    const char *set = sg_blas_decide(&c, "Prescott", NULL, &ch);
    assert_non_null(set);
    assert_string_equal(set, "Cooperlake");
    assert_string_equal(ch.core, "Cooperlake");
    assert_string_equal(ch.default_core, "Prescott");
    assert_string_equal(ch.source, "cpu-features");
    assert_non_null(strstr(ch.reason, "OPENBLAS_CORETYPE=Cooperlake"));
    assert_non_null(strstr(ch.reason, "model 207"));
    /* without bf16: SkylakeX */
    c.features &= ~(uint32_t)SG_CPU_AVX512_BF16;
    set = sg_blas_decide(&c, "Prescott", NULL, &ch);
    assert_string_equal(set, "SkylakeX");
}

/* a CPU OpenBLAS knows: nothing changes */
static void test_known_cpu_unchanged(void **state)
{
    (void)state;
    sg_blas_choice_t ch;
    sg_cpu_t c = cpu("AuthenticAMD", 25, 1, AVX2_SET);
    assert_null(sg_blas_decide(&c, "Zen", NULL, &ch));
    assert_string_equal(ch.core, "Zen");
    assert_string_equal(ch.source, "library");
    c = cpu("GenuineIntel", 6, 85, AVX512_SET);
    assert_null(sg_blas_decide(&c, "SkylakeX", NULL, &ch));
    c = cpu("GenuineIntel", 6, 63, AVX2_SET);
    assert_null(sg_blas_decide(&c, "Haswell", NULL, &ch));
    /* a stronger pick than the table's best (an AVX2 Zen reported as Haswell) is kept too */
    c = cpu("AuthenticAMD", 23, 1, AVX2_SET);
    assert_null(sg_blas_decide(&c, "Haswell", NULL, &ch));
    /* a core name the table does not rank is left alone */
    assert_null(sg_blas_decide(&c, "SomeFutureCore", NULL, &ch));
    assert_string_equal(ch.core, "SomeFutureCore");
    /* no AVX at all */
    c = cpu("GenuineIntel", 6, 26, SG_CPU_SSE3);
    assert_null(sg_blas_decide(&c, "Nehalem", NULL, &ch));
}

/* features taken away (SG_CPU_FEATURES) lower the best core; Haswell features off, then on */
static void test_restricted_features(void **state)
{
    (void)state;
    char err[256];
    sg_blas_choice_t ch;
    sg_cpu_t c = cpu("GenuineIntel", 6, 63, AVX2_SET);
    assert_int_equal(sg_cpu_restrict(&c, "sse3,avx", err, sizeof(err)), 0);
    assert_int_equal(c.features, SG_CPU_SSE3 | SG_CPU_AVX);
    assert_string_equal(sg_blas_best_core(&c), "Sandybridge");
    assert_null(sg_blas_decide(&c, "Haswell", NULL, &ch)); /* the library's Haswell is not weaker: unchanged */
    assert_string_equal(sg_blas_decide(&c, "Prescott", NULL, &ch), "Sandybridge");
    assert_int_equal(sg_cpu_restrict(&c, "sse3, avx,fma ,avx2", err, sizeof(err)), 0);
    assert_int_equal(c.features, AVX2_SET);
    assert_string_equal(sg_blas_decide(&c, "Prescott", NULL, &ch), "Haswell");
    /* a feature the CPU lacks cannot be claimed */
    assert_int_equal(sg_cpu_restrict(&c, "avx2,fma,avx512f,avx512bw,avx512dq,avx512vl", err, sizeof(err)), 0);
    assert_int_equal(c.features, SG_CPU_AVX2 | SG_CPU_FMA);
    assert_int_equal(sg_cpu_restrict(&c, "avx2,avx9000", err, sizeof(err)), -1);
    assert_non_null(strstr(err, "avx9000"));
}

static void test_user_setting_wins(void **state)
{
    (void)state;
    sg_blas_choice_t ch;
    sg_cpu_t c = cpu("GenuineIntel", 6, 207, AVX512_SET);
    assert_null(sg_blas_decide(&c, "Haswell", "Haswell", &ch));
    assert_string_equal(ch.source, "user");
    assert_string_equal(ch.core, "Haswell");
    assert_non_null(strstr(ch.reason, "set by the user"));
}

static void test_describe_and_bf16(void **state)
{
    (void)state;
    char buf[200];
    sg_cpu_describe(AVX2_SET, buf, sizeof(buf));
    assert_string_equal(buf, "sse3 avx fma avx2");
    sg_cpu_describe(0, buf, sizeof(buf));
    assert_string_equal(buf, "none");
    sg_cpu_t c = cpu("GenuineIntel", 6, 143, AVX512_SET | SG_CPU_AMX_TILE | SG_CPU_AMX_BF16);
    assert_true(sg_cpu_has_bf16(&c));
    c = cpu("AuthenticAMD", 25, 1, AVX2_SET);
    assert_false(sg_cpu_has_bf16(&c));
}

/* the real machine: whatever it is, the read is consistent with the compiler's own view */
static void test_this_machine(void **state)
{
    (void)state;
    sg_cpu_t c;
    sg_cpu_read(&c);
    assert_int_equal(c.features, c.detected);
#if defined(__x86_64__)
    __builtin_cpu_init();
    assert_int_equal(!!(c.features & SG_CPU_AVX2), !!__builtin_cpu_supports("avx2"));
    assert_int_equal(!!(c.features & SG_CPU_FMA), !!__builtin_cpu_supports("fma"));
    assert_int_equal(!!(c.features & SG_CPU_AVX512F), !!__builtin_cpu_supports("avx512f"));
    assert_true(strcmp(c.vendor, "unknown") != 0);
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_best_core_by_features),  cmocka_unit_test(test_core_rank),
        cmocka_unit_test(test_unknown_xeon_is_forced), cmocka_unit_test(test_known_cpu_unchanged),
        cmocka_unit_test(test_restricted_features),    cmocka_unit_test(test_user_setting_wins),
        cmocka_unit_test(test_describe_and_bf16),      cmocka_unit_test(test_this_machine),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
