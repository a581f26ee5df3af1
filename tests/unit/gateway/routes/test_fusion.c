/* Unit tests: the merge of fusion routes (gateway/routes/fusion.c), against values computed by
 * hand (the comments show the arithmetic). The settings: config/test_fusion_conf.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fusion.h"

/* ---- helpers ---- */

typedef struct {
    const char *doc;
    double score;
} hit_spec;

#define MAXH 16
static sg_fusion_hit_t hits_store[SG_FUSION_MAX_LEGS][MAXH];

static sg_fusion_leg_t leg(int l, const hit_spec *spec, uint32_t n)
{
    for (uint32_t i = 0; i < n; ++i) {
        hits_store[l][i].doc = spec[i].doc;
        hits_store[l][i].len = (uint32_t)strlen(spec[i].doc);
        hits_store[l][i].score = spec[i].score;
    }
    sg_fusion_leg_t r = {hits_store[l], n, 1};
    return r;
}

static void conf_init(sg_fusion_conf_t *fc, int method, double k, uint32_t n_legs, const double *weights, const int *norm)
{
    static double w[SG_FUSION_MAX_LEGS];
    static int nm[SG_FUSION_MAX_LEGS];
    memset(fc, 0, sizeof(*fc));
    fc->method = method;
    fc->k = k;
    fc->n_legs = n_legs;
    for (uint32_t i = 0; i < n_legs; ++i) {
        w[i] = weights != NULL ? weights[i] : 1.0;
        nm[i] = norm != NULL ? norm[i] : SG_NORM_MINMAX;
    }
    fc->weights = w;
    fc->normalize = nm;
}

#define A "{\"id\":\"a\",\"contents\":\"alpha\"}"
#define B "{\"id\":\"b\",\"contents\":\"beta\"}"
#define C "{\"id\":\"c\",\"contents\":\"gamma\"}"
#define D "{\"id\":\"d\",\"contents\":\"delta\"}"

static void expect(const sg_fusion_out_t *out, uint32_t i, uint32_t leg, uint32_t hit, double score)
{
    assert_int_equal(out[i].leg, leg);
    assert_int_equal(out[i].hit, hit);
    assert_true(fabs(out[i].score - score) < 1e-12);
}

/* ---- merge: RRF ---- */

static void test_rrf_basic(void **state)
{
    (void)state;
    sg_fusion_conf_t fc;
    conf_init(&fc, SG_FUSION_RRF, 60, 2, NULL, NULL);
    hit_spec l0[] = {{A, 9}, {B, 8}, {C, 7}}, l1[] = {{B, .9}, {D, .8}, {A, .7}};
    sg_fusion_leg_t legs[2] = {leg(0, l0, 3), leg(1, l1, 3)};
    sg_fusion_out_t out[10];
    /* A = 1/61 + 1/63 = .0322659; B = 1/62 + 1/61 = .0325225; C = 1/63; D = 1/62 */
    assert_int_equal(sg_fusion_merge(&fc, legs, 10, out), 4);
    expect(out, 0, 0, 1, 1.0 / 62 + 1.0 / 61); /* B: the DOC of leg 0 (its first leg), hit 1 */
    expect(out, 1, 0, 0, 1.0 / 61 + 1.0 / 63); /* A */
    expect(out, 2, 1, 1, 1.0 / 62);            /* D: only in leg 1 */
    expect(out, 3, 0, 2, 1.0 / 63);            /* C */
    /* topk cuts the fused list, not the legs */
    assert_int_equal(sg_fusion_merge(&fc, legs, 2, out), 2);
    expect(out, 1, 0, 0, 1.0 / 61 + 1.0 / 63);
}

static void test_rrf_weights_and_k(void **state)
{
    (void)state;
    sg_fusion_conf_t fc;
    double w[] = {1, 3};
    conf_init(&fc, SG_FUSION_RRF, 0, 2, w, NULL);
    hit_spec l0[] = {{A, 0}, {B, 0}}, l1[] = {{B, 0}, {A, 0}};
    sg_fusion_leg_t legs[2] = {leg(0, l0, 2), leg(1, l1, 2)};
    sg_fusion_out_t out[4];
    /* k = 0: A = 1/1 + 3/2 = 2.5; B = 1/2 + 3/1 = 3.5 */
    assert_int_equal(sg_fusion_merge(&fc, legs, 4, out), 2);
    expect(out, 0, 0, 1, 3.5);
    expect(out, 1, 0, 0, 2.5);
}

static void test_rrf_ties(void **state)
{
    (void)state;
    sg_fusion_conf_t fc;
    /* equal scores, equal best rank: route order decides (A from leg 0 before B from leg 1) */
    conf_init(&fc, SG_FUSION_RRF, 60, 2, NULL, NULL);
    hit_spec s0[] = {{A, 1}}, s1[] = {{B, 1}};
    sg_fusion_leg_t legs[2] = {leg(0, s0, 1), leg(1, s1, 1)};
    sg_fusion_out_t out[4];
    assert_int_equal(sg_fusion_merge(&fc, legs, 4, out), 2);
    expect(out, 0, 0, 0, 1.0 / 61);
    expect(out, 1, 1, 0, 1.0 / 61);
    /* swapped: still the leg order, not the document */
    sg_fusion_leg_t swapped[2] = {leg(0, s1, 1), leg(1, s0, 1)};
    assert_int_equal(sg_fusion_merge(&fc, swapped, 4, out), 2);
    assert_int_equal(out[0].leg, 0);
    assert_memory_equal(hits_store[0][0].doc, B, strlen(B));

    /* equal scores, different best ranks: k = 0, Q = 1/1 (rank 1 of leg 0), R = 1/1 (rank 1 of
     * leg 1), P = 1/2 + 1/2 = 1 (rank 2 in both): all exactly 1.0; best rank then leg order -> Q, R, P */
    conf_init(&fc, SG_FUSION_RRF, 0, 2, NULL, NULL);
    hit_spec t0[] = {{A, 0}, {C, 0}}, t1[] = {{B, 0}, {C, 0}};
    sg_fusion_leg_t legs2[2] = {leg(0, t0, 2), leg(1, t1, 2)};
    assert_int_equal(sg_fusion_merge(&fc, legs2, 4, out), 3);
    expect(out, 0, 0, 0, 1.0); /* A */
    expect(out, 1, 1, 0, 1.0); /* B */
    expect(out, 2, 0, 1, 1.0); /* C */
}

static void test_duplicates_in_one_leg(void **state)
{
    (void)state;
    sg_fusion_conf_t fc;
    conf_init(&fc, SG_FUSION_RRF, 60, 2, NULL, NULL);
    /* leg 0 returns A twice: it counts once, at rank 1, and B moves up to rank 2.
     * A = 1/61 = .016393; B = 1/62 + 1/61 = .032522 (had the duplicate counted, A = 1/61 + 1/62 = .032522
     * would beat B = 1/63 + 1/61 = .032266) */
    hit_spec l0[] = {{A, 3}, {A, 2}, {B, 1}}, l1[] = {{B, 1}};
    sg_fusion_leg_t legs[2] = {leg(0, l0, 3), leg(1, l1, 1)};
    sg_fusion_out_t out[4];
    assert_int_equal(sg_fusion_merge(&fc, legs, 4, out), 2);
    expect(out, 0, 0, 2, 1.0 / 62 + 1.0 / 61); /* B: hit 2 of leg 0 */
    expect(out, 1, 0, 0, 1.0 / 61);
}

static void test_failed_leg(void **state)
{
    (void)state;
    sg_fusion_conf_t fc;
    conf_init(&fc, SG_FUSION_RRF, 60, 2, NULL, NULL);
    hit_spec l0[] = {{A, 3}, {B, 2}}, l1[] = {{B, 1}};
    sg_fusion_leg_t legs[2] = {leg(0, l0, 2), leg(1, l1, 1)};
    legs[1].ok = 0; /* its hits must not count */
    sg_fusion_out_t out[4];
    assert_int_equal(sg_fusion_merge(&fc, legs, 4, out), 2);
    expect(out, 0, 0, 0, 1.0 / 61);
    expect(out, 1, 0, 1, 1.0 / 62);
    legs[0].ok = 0;
    assert_int_equal(sg_fusion_merge(&fc, legs, 4, out), 0);
    /* an empty list is a valid answer */
    legs[0].ok = 1;
    legs[0].n = 0;
    assert_int_equal(sg_fusion_merge(&fc, legs, 4, out), 0);
}

/* ---- merge: identity ---- */

static void test_identity(void **state)
{
    (void)state;
    size_t n;
    char *k = sg_fusion_doc_identity("{\"id\":\"\\u0041\",\"url\":\"u\"}", 26, &n);
    assert_int_equal(n, 2);
    assert_memory_equal(k, "iA", 2);
    free(k);
    const char *d = "{\"id\":\"\",\"url\":\"http://x\",\"contents\":\"c\"}";
    k = sg_fusion_doc_identity(d, strlen(d), &n);
    assert_int_equal(n, 9);
    assert_memory_equal(k, "uhttp://x", 9);
    free(k);
    d = "{\"url\":\"\",\"contents\":\"same\"}";
    k = sg_fusion_doc_identity(d, strlen(d), &n);
    assert_int_equal(n, 5);
    assert_memory_equal(k, "csame", 5);
    free(k);
    d = "{\"id\":7}";
    k = sg_fusion_doc_identity(d, strlen(d), &n);
    assert_memory_equal(k, "i7", 2);
    free(k);
    d = "[1]";
    k = sg_fusion_doc_identity(d, strlen(d), &n);
    assert_int_equal(n, 4);
    assert_memory_equal(k, "d[1]", 4);
    free(k);
}

static void test_merge_by_identity(void **state)
{
    (void)state;
    sg_fusion_conf_t fc;
    conf_init(&fc, SG_FUSION_RRF, 60, 2, NULL, NULL);
    /* leg 0: U1 (url only), X (no id, no url), I7 (id 7 + url y)
     * leg 1: I8 (id 8 + url y: a different document, the id wins), X' (same contents, other fields),
     *        U1' (id "" and the same url: the same document) */
    hit_spec l0[] = {{"{\"url\":\"http://x\",\"contents\":\"first\"}", 3},
                     {"{\"contents\":\"same text\",\"title\":\"t0\"}", 2},
                     {"{\"id\":\"7\",\"url\":\"http://y\",\"contents\":\"q\"}", 1}};
    hit_spec l1[] = {{"{\"id\":\"8\",\"url\":\"http://y\",\"contents\":\"q\"}", 3},
                     {"{\"contents\":\"same text\",\"title\":\"t1\"}", 2},
                     {"{\"id\":\"\",\"url\":\"http://x\",\"contents\":\"second\"}", 1}};
    sg_fusion_leg_t legs[2] = {leg(0, l0, 3), leg(1, l1, 3)};
    sg_fusion_out_t out[8];
    /* U1 = 1/61 + 1/63; X = 1/62 + 1/62; I8 = 1/61; I7 = 1/63 */
    assert_int_equal(sg_fusion_merge(&fc, legs, 8, out), 4);
    expect(out, 0, 0, 0, 1.0 / 61 + 1.0 / 63); /* U1 = .0322664: the DOC of leg 0 */
    expect(out, 1, 0, 1, 2.0 / 62);            /* X = .0322581 */
    expect(out, 2, 1, 0, 1.0 / 61);            /* I8 */
    expect(out, 3, 0, 2, 1.0 / 63);            /* I7 */
}

/* ---- merge: weighted ---- */

static void test_weighted_minmax(void **state)
{
    (void)state;
    sg_fusion_conf_t fc;
    double w[] = {1, 2};
    conf_init(&fc, SG_FUSION_WEIGHTED, 0, 2, w, NULL);
    /* leg 0: 10, 6, 2 -> 1, .5, 0; leg 1: .9, .3 -> 1, 0.
     * A = 1*1 = 1; B = .5; C = 1*0 + 2*1 = 2; D = 2*0 = 0 */
    hit_spec l0[] = {{A, 10}, {B, 6}, {C, 2}}, l1[] = {{C, .9}, {D, .3}};
    sg_fusion_leg_t legs[2] = {leg(0, l0, 3), leg(1, l1, 2)};
    sg_fusion_out_t out[8];
    assert_int_equal(sg_fusion_merge(&fc, legs, 8, out), 4);
    expect(out, 0, 0, 2, 2.0);
    expect(out, 1, 0, 0, 1.0);
    expect(out, 2, 0, 1, 0.5);
    expect(out, 3, 1, 1, 0.0);
}

static void test_weighted_minmax_single_and_ties(void **state)
{
    (void)state;
    sg_fusion_conf_t fc;
    conf_init(&fc, SG_FUSION_WEIGHTED, 0, 2, NULL, NULL);
    /* a one-hit list normalises to 1; so does a list whose scores all tie.
     * A = 1 (alone in leg 0), B = 1 (top of leg 1), C = 0: A and B tie at rank 1 -> route order */
    hit_spec l0[] = {{A, 5}}, l1[] = {{B, .2}, {C, .1}};
    sg_fusion_leg_t legs[2] = {leg(0, l0, 1), leg(1, l1, 2)};
    sg_fusion_out_t out[8];
    assert_int_equal(sg_fusion_merge(&fc, legs, 8, out), 3);
    expect(out, 0, 0, 0, 1.0);
    expect(out, 1, 1, 0, 1.0);
    expect(out, 2, 1, 1, 0.0);
    hit_spec t0[] = {{A, 4}, {B, 4}}, t1[] = {{C, 4}};
    sg_fusion_leg_t legs2[2] = {leg(0, t0, 2), leg(1, t1, 1)};
    assert_int_equal(sg_fusion_merge(&fc, legs2, 8, out), 3);
    expect(out, 0, 0, 0, 1.0); /* A: rank 1 of leg 0 */
    expect(out, 1, 1, 0, 1.0); /* C: rank 1 of leg 1 */
    expect(out, 2, 0, 1, 1.0); /* B: rank 2 */
}

static void test_weighted_zscore(void **state)
{
    (void)state;
    sg_fusion_conf_t fc;
    int norm[] = {SG_NORM_ZSCORE, SG_NORM_ZSCORE};
    conf_init(&fc, SG_FUSION_WEIGHTED, 0, 2, NULL, norm);
    /* leg 0: 3, 1 -> mean 2, population sd 1 -> +1, -1; leg 1: 5, 5, 5 -> sd 0 -> 0 each.
     * A = 1 + 0 = 1; C = 0 (rank 1 of leg 1); D = 0 (rank 3); B = -1 */
    hit_spec l0[] = {{A, 3}, {B, 1}}, l1[] = {{C, 5}, {A, 5}, {D, 5}};
    sg_fusion_leg_t legs[2] = {leg(0, l0, 2), leg(1, l1, 3)};
    sg_fusion_out_t out[8];
    assert_int_equal(sg_fusion_merge(&fc, legs, 8, out), 4);
    expect(out, 0, 0, 0, 1.0);
    expect(out, 1, 1, 0, 0.0);
    expect(out, 2, 1, 2, 0.0);
    expect(out, 3, 0, 1, -1.0);
    /* three values: 1, 2, 6 -> mean 3, sd sqrt(14/3) */
    hit_spec z0[] = {{A, 6}, {B, 2}, {C, 1}}, z1[] = {{D, 1}};
    sg_fusion_leg_t legs2[2] = {leg(0, z0, 3), leg(1, z1, 1)};
    double sd = sqrt(14.0 / 3);
    assert_int_equal(sg_fusion_merge(&fc, legs2, 8, out), 4);
    expect(out, 0, 0, 0, 3 / sd);
    expect(out, 1, 1, 0, 0.0);
    expect(out, 2, 0, 1, -1 / sd);
    expect(out, 3, 0, 2, -2 / sd);
}

static void test_weighted_none_and_nan(void **state)
{
    (void)state;
    sg_fusion_conf_t fc;
    int norm[] = {SG_NORM_NONE, SG_NORM_MINMAX};
    double w[] = {2, 1};
    conf_init(&fc, SG_FUSION_WEIGHTED, 0, 2, w, norm);
    /* leg 0 raw: A = 2 * 1.25 = 2.5; leg 1 minmax over the finite scores (1 and 3): B (NaN) -> 0,
     * C = 1 -> 0, A = 3 -> 1. A = 2.5 + 1 = 3.5; B = 0 (rank 1 of leg 1); C = 0 (rank 3) */
    hit_spec l0[] = {{A, 1.25}}, l1[] = {{B, NAN}, {C, 1}, {A, 3}};
    sg_fusion_leg_t legs[2] = {leg(0, l0, 1), leg(1, l1, 3)};
    sg_fusion_out_t out[8];
    assert_int_equal(sg_fusion_merge(&fc, legs, 8, out), 3);
    expect(out, 0, 0, 0, 3.5);
    expect(out, 1, 1, 0, 0.0);
    expect(out, 2, 1, 1, 0.0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rrf_basic),
        cmocka_unit_test(test_rrf_weights_and_k),
        cmocka_unit_test(test_rrf_ties),
        cmocka_unit_test(test_duplicates_in_one_leg),
        cmocka_unit_test(test_failed_leg),
        cmocka_unit_test(test_identity),
        cmocka_unit_test(test_merge_by_identity),
        cmocka_unit_test(test_weighted_minmax),
        cmocka_unit_test(test_weighted_minmax_single_and_ties),
        cmocka_unit_test(test_weighted_zscore),
        cmocka_unit_test(test_weighted_none_and_nan),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
