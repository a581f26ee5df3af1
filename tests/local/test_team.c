/*
 * test_team.c -- a lone batch on every core: the worker team (team.c), the encoder split over it
 * (e5.c) and the flat index scanned by slices (flatscan.c).
 *
 *   - every task of every step runs exactly once, on a slot no other running task holds, with
 *     helpers joining late and leaving in the middle of a session;
 *   - the encoder gives the same embeddings with 2 and 4 threads as alone: to float rounding on
 *     the BLAS, bit for bit with the own float32 kernels and with int8;
 *   - so does the cross-encoder (xenc.h) its scores (to 2e-6 relative: logits are ~3, not unit
 *     vectors), which stay within 1e-5 of its goldens;
 *   - flatscan gives FAISS's own results (in the canonical order), for IP and L2, with ties, with
 *     k larger than the index, and with any number of slices.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "e5.h"
#include "faissidx.h"
#include "blas.h"
#include "flatscan.h"
#include "kern.h"
#include "team.h"
#include "testutil.h"
#include "xenc.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>

/* ---- a team of real threads: the lead is the test thread, helpers loop on sg_team_help ---- */

typedef struct {
    sg_team_t team;
    unsigned workers;
    pthread_t threads[8];
    _Atomic int stop, leave[8];
    unsigned idx[8];
} pool_t;

typedef struct {
    pool_t *p;
    unsigned i;
} helper_arg_t;

static helper_arg_t hargs[8];

static void *helper_main(void *arg)
{
    helper_arg_t *a = arg;
    while (!atomic_load(&a->p->stop)) {
        if (sg_team_is_open(&a->p->team) && !atomic_load(&a->p->leave[a->i]))
            sg_team_help(&a->p->team, a->i, &a->p->leave[a->i]);
        else
            sched_yield();
    }
    return NULL;
}

static void pool_start(pool_t *p, unsigned workers)
{
    memset(p, 0, sizeof(*p));
    p->workers = workers;
    sg_team_init(&p->team, workers);
    for (unsigned i = 1; i < workers; ++i) {
        hargs[i].p = p;
        hargs[i].i = i;
        assert_int_equal(pthread_create(&p->threads[i], NULL, helper_main, &hargs[i]), 0);
    }
}

static void pool_stop(pool_t *p)
{
    atomic_store(&p->stop, 1);
    for (unsigned i = 1; i < p->workers; ++i)
        pthread_join(p->threads[i], NULL);
}

/* ---- the team itself ---- */

enum { MAX_TASKS = 500 };
typedef struct {
    _Atomic int runs[MAX_TASKS];
    _Atomic int slot_busy[8];
    _Atomic int slot_clash, bad_slot;
    unsigned slots;
} count_t;

static void count_task(void *arg, size_t i, unsigned slot)
{
    count_t *c = arg;
    if (slot >= c->slots) {
        atomic_store(&c->bad_slot, 1);
        return;
    }
    if (atomic_fetch_add(&c->slot_busy[slot], 1) != 0)
        atomic_store(&c->slot_clash, 1);
    atomic_fetch_add(&c->runs[i], 1);
    for (volatile int spin = 0; spin < 200; ++spin)
        ;
    atomic_fetch_sub(&c->slot_busy[slot], 1);
}

static void test_every_task_once(void **state)
{
    (void)state;
    pool_t p;
    pool_start(&p, 4);
    static count_t c;
    for (int session = 0; session < 40; ++session) {
        /* helpers leave in the middle of some sessions, as they do when new work is queued */
        for (unsigned i = 1; i < 4; ++i)
            atomic_store(&p.leave[i], session % 5 == 3 && i == 2);
        sg_team_open(&p.team, 0, 4);
        for (int step = 0; step < 25; ++step) {
            size_t n = (size_t)((session * 7 + step * 13) % MAX_TASKS) + 1;
            memset(&c, 0, sizeof(c));
            c.slots = 4;
            if (step == 12 && session % 5 == 3)
                atomic_store(&p.leave[3], 1);
            sg_par_run(&p.team.par, n, count_task, &c);
            for (size_t i = 0; i < n; ++i)
                assert_int_equal(atomic_load(&c.runs[i]), 1);
            for (size_t i = n; i < MAX_TASKS; ++i)
                assert_int_equal(atomic_load(&c.runs[i]), 0);
            assert_int_equal(atomic_load(&c.slot_clash), 0);
            assert_int_equal(atomic_load(&c.bad_slot), 0);
        }
        sg_team_close(&p.team);
    }
    pool_stop(&p);                                      /* the helpers count their tasks when they leave a session */
    assert_true(atomic_load(&p.team.helped_tasks) > 0); /* they did take part */
}

/* another worker leads the next session: slots still count from the lead */
static void test_lead_changes(void **state)
{
    (void)state;
    pool_t p;
    pool_start(&p, 3);
    static count_t c;
    /* worker 2 leads from this thread's point of view: helper 2 must not join its own session,
     * so it is told to stay out */
    atomic_store(&p.leave[2], 1);
    sg_team_open(&p.team, 2, 2);
    memset(&c, 0, sizeof(c));
    c.slots = 3;
    sg_par_run(&p.team.par, 300, count_task, &c);
    for (size_t i = 0; i < 300; ++i)
        assert_int_equal(atomic_load(&c.runs[i]), 1);
    assert_int_equal(atomic_load(&c.slot_clash), 0);
    assert_int_equal(atomic_load(&c.bad_slot), 0);
    sg_team_close(&p.team);
    pool_stop(&p);
}

/* ---- the encoder over the team ---- */

/* One engine of the linear layers (0: the BLAS, 1: the own float32 kernels, 2: int8) over teams of
 * 2 and 4 threads. The own kernels give the single thread's bits however the team cuts the
 * products; the BLAS's column slices may round differently (1e-6). */
static void encoder_same_with_any_threads(int engine)
{
    sg_e5_model *m;
    char err[512];
    assert_int_equal(sg_e5_load(SG_FIXTURES "/e5-tiny", &m, err, sizeof(err)), 0);
    int f32 = sg_kern_f32_best(sg_e5_features(m));
    if (engine == 1 && f32 == SG_KERN_NONE) {
        sg_e5_free(m);
        return;
    }
    if (engine == 1)
        assert_int_equal(sg_e5_use_kernels(m, f32, err, sizeof(err)), 0);
    if (engine == 2)
        assert_int_equal(sg_e5_set_precision(m, SG_E5_INT8, err, sizeof(err)), 0);
    /* 15 texts, ~140 tokens: the products split by rows; the first 3 alone, ~20 tokens: by columns */
    const char *base[] = {"who wrote hamlet", "the capital of france", "a", "Zürich is in Switzerland",
                          "a much longer query about the history of the roman empire and its many emperors"};
    enum { NT = 15 };
    const char *texts[NT];
    size_t lens[NT];
    for (int i = 0; i < NT; ++i) {
        texts[i] = base[i % 5];
        lens[i] = strlen(texts[i]);
    }
    int dim = sg_e5_dim(m);
    float *want = malloc(sizeof(float) * NT * (size_t)dim), *got = malloc(sizeof(float) * NT * (size_t)dim);
    float *want3 = malloc(sizeof(float) * 3 * (size_t)dim);
    sg_e5_workspace *w = sg_e5_workspace_new(m);
    assert_int_equal(sg_e5_encode(m, w, "query: ", texts, lens, NT, 256, want, err, sizeof(err)), 0);
    assert_int_equal(sg_e5_encode(m, w, "query: ", texts, lens, 3, 256, want3, err, sizeof(err)), 0);
    for (unsigned workers = 2; workers <= 4; workers += 2) {
        pool_t p;
        pool_start(&p, workers);
        for (int rep = 0; rep < 4; ++rep) {
            size_t nt = rep % 2 == 0 ? NT : 3;
            const float *ref = nt == NT ? want : want3;
            sg_team_open(&p.team, 0, workers);
            sg_e5_workspace_set_par(w, &p.team.par);
            memset(got, 0xff, sizeof(float) * NT * (size_t)dim);
            assert_int_equal(sg_e5_encode(m, w, "query: ", texts, lens, nt, 256, got, err, sizeof(err)), 0);
            sg_e5_workspace_set_par(w, NULL);
            sg_team_close(&p.team);
            if (engine == 0) {
                for (size_t i = 0; i < nt * (size_t)dim; ++i)
                    assert_true(fabsf(got[i] - ref[i]) <= 1e-6f);
            } else {
                assert_memory_equal(got, ref, sizeof(float) * nt * (size_t)dim);
            }
        }
        assert_true(atomic_load(&p.team.tasks) > 0);
        pool_stop(&p);
    }
    free(want);
    free(want3);
    free(got);
    sg_e5_workspace_free(w);
    sg_e5_free(m);
}

static void test_encoder_same_with_any_threads(void **state)
{
    (void)state;
    encoder_same_with_any_threads(0);
}

static void test_encoder_own_kernels_same_bits_with_any_threads(void **state)
{
    (void)state;
    encoder_same_with_any_threads(1);
}

static void test_encoder_int8_same_bits_with_any_threads(void **state)
{
    (void)state;
    encoder_same_with_any_threads(2);
}

/* ---- the cross-encoder over the team ---- */

static void test_xenc_same_with_any_threads(void **state)
{
    (void)state;
    sg_xenc_model *m;
    char err[512];
    assert_int_equal(sg_xenc_load(SG_FIXTURES "/xenc-tiny", &m, err, sizeof(err)), 0);
    /* the golden pairs of the fixture's most frequent query (max_length 512): ~17 passages, one of
     * 512 tokens, so the products split by rows; the first 2 alone, ~50 tokens: by columns */
    size_t len;
    char *all = tu_read_file(SG_FIXTURES "/xenc-tiny/golden.jsonl", &len);
    assert_non_null(all);
    enum { MAXP = 64 };
    char *query = NULL, *passages[MAXP];
    size_t qlen = 0, plens[MAXP], np = 0;
    float golden[MAXP];
    char *save = NULL;
    for (char *line = strtok_r(all, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
        size_t ql;
        char *q = tu_json_string_field(line, "query", &ql);
        cJSON *o = cJSON_Parse(line);
        assert_non_null(o);
        int ml = (int)cJSON_GetObjectItem(o, "max_length")->valuedouble;
        if (query == NULL && ml == 512) {
            query = q;
            qlen = ql;
        } else if (query == NULL || ql != qlen || memcmp(q, query, ql) != 0 || ml != 512) {
            free(q);
            cJSON_Delete(o);
            continue;
        } else {
            free(q);
        }
        assert_true(np < MAXP);
        passages[np] = tu_json_string_field(line, "passage", &plens[np]);
        golden[np++] = (float)cJSON_GetObjectItem(o, "logits")->child->valuedouble;
        cJSON_Delete(o);
    }
    free(all);
    assert_true(np >= 10);
    float want[MAXP], got[MAXP];
    sg_xenc_workspace *w = sg_xenc_workspace_new(m);
    assert_int_equal(sg_xenc_score(m, w, query, qlen, (const char *const *)passages, plens, np, 512, want, err, sizeof(err)), 0);
    for (size_t i = 0; i < np; ++i)
        assert_true(fabsf(want[i] - golden[i]) <= 1e-5f);
    float worst_alone = 0, worst_golden = 0;
    for (unsigned workers = 2; workers <= 4; workers += 2) {
        pool_t p;
        pool_start(&p, workers);
        for (int rep = 0; rep < 4; ++rep) {
            size_t n = rep % 2 == 0 ? np : 2;
            sg_team_open(&p.team, 0, workers);
            sg_xenc_workspace_set_par(w, &p.team.par);
            memset(got, 0xff, sizeof(got));
            assert_int_equal(sg_xenc_score(m, w, query, qlen, (const char *const *)passages, plens, n, 512, got, err, sizeof(err)),
                             0);
            sg_xenc_workspace_set_par(w, NULL);
            sg_team_close(&p.team);
            for (size_t i = 0; i < n; ++i) {
                /* float rounding of other summation orders, relative to logits of magnitude ~3 */
                worst_alone = fmaxf(worst_alone, fabsf(got[i] - want[i]) / (1.0f + fabsf(want[i])));
                worst_golden = fmaxf(worst_golden, fabsf(got[i] - golden[i]));
            }
        }
        assert_true(atomic_load(&p.team.tasks) > 0);
        pool_stop(&p);
    }
    fprintf(stderr, "cross-encoder on a team: worst diff %.3g (relative) to one thread, %.3g (abs) to the goldens\n", worst_alone,
            worst_golden);
    assert_true(worst_alone <= 2e-6f);
    assert_true(worst_golden <= 1e-5f);
    for (size_t i = 0; i < np; ++i)
        free(passages[i]);
    free(query);
    sg_xenc_workspace_free(w);
    sg_xenc_free(m);
}

/* ---- flatscan against FAISS ---- */

static float frand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) & 0xFFFFFF) / (float)0x1000000 - 0.5f;
}

/* One kernel against FAISS's results (wl/wd) on 1 to 4 workers. `tail_dup` (in-place kernels):
 * query 0 is row 0 and the last row is its copy, in a padded tile: they must score bit-identically,
 * lower id first (sgemm's blocking may round twins apart). In-place kernels also give every query
 * the same bits alone (the one-query tile) as in the batch (the wide tiles). */
static void check_kernel(const sg_flatscan_t *fs, int rows, int k, const float *q, size_t nq, const int64_t *wl, const float *wd,
                         int64_t *gl, float *gd, int tail_dup)
{
    char err[256];
    for (unsigned workers = 1; workers <= 4; ++workers) {
        pool_t p;
        pool_start(&p, workers);
        sg_team_open(&p.team, 0, workers);
        assert_int_equal(sg_flatscan_search(fs, workers > 1 ? &p.team.par : NULL, nq, q, k, gd, gl, err, sizeof(err)), 0);
        sg_team_close(&p.team);
        pool_stop(&p);
        if (tail_dup) {
            assert_int_equal(gl[0], 0);
            assert_int_equal(gl[1], rows - 1);
            assert_memory_equal(&gd[0], &gd[1], sizeof(float));
        }
        /* (FAISS's own sgemm may round the twins apart: their order is checked above) */
        for (size_t i = tail_dup ? 2 : 0; i < nq * (size_t)k; ++i) {
            assert_int_equal(gl[i], wl[i]);
            if (wl[i] >= 0)
                assert_true(fabsf(gd[i] - wd[i]) <= 1e-4f * (1.0f + fabsf(wd[i])));
        }
    }
    if (fs->kernel == SG_FLATSCAN_SGEMM)
        return;
    float d1[64];
    int64_t l1[64];
    assert_true(k <= 64);
    for (size_t i = 0; i < nq; ++i) {
        assert_int_equal(sg_flatscan_search(fs, NULL, 1, q + i * (size_t)fs->dim, k, d1, l1, err, sizeof(err)), 0);
        assert_memory_equal(l1, gl + i * (size_t)k, sizeof(int64_t) * (size_t)k);
        assert_memory_equal(d1, gd + i * (size_t)k, sizeof(float) * (size_t)k);
    }
}

/* tail_dup: the last row is a copy of row 0, so it sits in a block's last, partial tile of
 * rows (the AVX2 kernel's padded path) while its twin sits in a full one */
static void check_metric(int metric, int rows, int dim, int k, int dup, int tail_dup)
{
    char err[512];
    char *dir = tu_mkdtemp();
    char path[512];
    snprintf(path, sizeof(path), "%s/flat.index", dir);
    uint64_t s = 7 + (uint64_t)metric * 31 + (uint64_t)rows;
    float *xb = malloc(sizeof(float) * (size_t)rows * (size_t)dim);
    for (int i = 0; i < rows * dim; ++i)
        xb[i] = frand(&s);
    /* exact duplicates: ties that both paths must order the same way */
    for (int r = 0; r + dup < rows && dup > 0; r += 97)
        memcpy(xb + (size_t)(r + dup) * (size_t)dim, xb + (size_t)r * (size_t)dim, sizeof(float) * (size_t)dim);
    sg_cpu_t cpu;
    sg_cpu_read(&cpu);
    if (tail_dup)
        memcpy(xb + (size_t)(rows - 1) * (size_t)dim, xb, sizeof(float) * (size_t)dim);
    void *idx;
    assert_int_equal(sg_fidx_create("Flat", dim, metric, &idx, err, sizeof(err)), 0);
    assert_int_equal(sg_fidx_add(idx, (size_t)rows, xb, err, sizeof(err)), 0);
    assert_int_equal(sg_fidx_write(idx, path, err, sizeof(err)), 0);
    sg_fidx_free(idx);
    sg_fidx_t ix;
    assert_int_equal(sg_fidx_open(path, NULL, &ix, err, sizeof(err)), 0);
    sg_flatscan_t fs;
    assert_int_equal(sg_flatscan_init(&fs, &ix), 0);
    int best = sg_flatscan_pick(cpu.features, dim);
    enum { NQ = 17 };
    float *q = malloc(sizeof(float) * NQ * (size_t)dim);
    for (int i = 0; i < NQ * dim; ++i)
        q[i] = frand(&s);
    memcpy(q, xb, sizeof(float) * (size_t)dim); /* a query equal to a duplicated row */
    float *wd = malloc(sizeof(float) * NQ * (size_t)k), *gd = malloc(sizeof(float) * NQ * (size_t)k);
    int64_t *wl = malloc(sizeof(int64_t) * NQ * (size_t)k), *gl = malloc(sizeof(int64_t) * NQ * (size_t)k);
    sg_fidx_set_blas_threshold(1);
    assert_int_equal(sg_fidx_search(&ix, NQ, q, k, wd, wl, err, sizeof(err)), 0);
    sg_flatscan_canonical(metric, NQ, k, wd, wl);
    /* every kernel this CPU runs for these vectors: sgemm, AVX2 in place, AVX-512 in place */
    int kernels[3], nk = 0;
    kernels[nk++] = SG_FLATSCAN_SGEMM;
    if (sg_flatscan_pick(cpu.features & ~SG_CPU_AVX512F, dim) == SG_FLATSCAN_AVX2)
        kernels[nk++] = SG_FLATSCAN_AVX2;
    if (best == SG_FLATSCAN_AVX512)
        kernels[nk++] = SG_FLATSCAN_AVX512;
    for (int i = 0; i < nk; ++i) {
        fs.kernel = kernels[i];
        print_message("flatscan %s, %d rows x %d\n", sg_flatscan_kernel_name(fs.kernel), rows, dim);
        check_kernel(&fs, rows, k, q, NQ, wl, wd, gl, gd, tail_dup && fs.kernel != SG_FLATSCAN_SGEMM);
    }
    if (dup > 0) /* query 0 is row 0: its duplicate scores the same, lower id first */
        assert_int_equal(wl[0], metric == SG_FIDX_L2 ? 0 : wl[0]);
    sg_fidx_close(&ix);
    free(xb);
    free(q);
    free(wd);
    free(gd);
    free(wl);
    free(gl);
    tu_rmtree(dir);
    free(dir);
}

static void test_flatscan_ip(void **state)
{
    (void)state;
    check_metric(SG_FIDX_IP, 5000, 48, 10, 3, 0);
}

/* rows that end in partial tiles (2051 = 2 blocks + 3) and 17 queries (5 x 3 + 2, 2 x 6 + 5): every path
 * of the block kernel, the same results as FAISS, ties across full and padded tiles exact */
static void test_flatscan_tails(void **state)
{
    (void)state;
    sg_cpu_t cpu;
    sg_cpu_read(&cpu);
    print_message("flatscan kernel for 40-d vectors here: %s\n", sg_flatscan_kernel_name(sg_flatscan_pick(cpu.features, 40)));
    check_metric(SG_FIDX_IP, 2051, 40, 4, 0, 1); /* AVX2 in place (not a multiple of 16) */
    check_metric(SG_FIDX_IP, 2051, 32, 4, 0, 1); /* AVX-512 in place where the CPU has it */
    check_metric(SG_FIDX_L2, 2049, 24, 3, 0, 1);
    check_metric(SG_FIDX_IP, 1030, 20, 3, 0, 0); /* 20 floats: not a multiple of 8, sgemm */
}

static void test_flatscan_l2(void **state)
{
    (void)state;
    check_metric(SG_FIDX_L2, 4100, 32, 5, 1, 0);
}

static void test_flatscan_small_index(void **state)
{
    (void)state;
    check_metric(SG_FIDX_IP, 7, 16, 10, 0, 0); /* k > ntotal: -1 labels, one slice */
}

/* the kernel decision: feature sets in, choice out */
static void test_flatscan_pick(void **state)
{
    (void)state;
    uint32_t avx2 = SG_CPU_SSE3 | SG_CPU_AVX | SG_CPU_FMA | SG_CPU_AVX2;
    uint32_t avx512 = avx2 | SG_CPU_AVX512F | SG_CPU_AVX512BW | SG_CPU_AVX512DQ | SG_CPU_AVX512VL;
#if defined(__x86_64__)
    assert_int_equal(sg_flatscan_pick(avx2, 768), SG_FLATSCAN_AVX2);
    assert_int_equal(sg_flatscan_pick(avx2, 8), SG_FLATSCAN_AVX2);
    assert_int_equal(sg_flatscan_pick(avx512, 768), SG_FLATSCAN_AVX512);
    assert_int_equal(sg_flatscan_pick(avx512, 40), SG_FLATSCAN_AVX2);                     /* not a multiple of 16 */
    assert_int_equal(sg_flatscan_pick(avx512 & ~SG_CPU_AVX512DQ, 768), SG_FLATSCAN_AVX2); /* no DQ */
#endif
    assert_int_equal(sg_flatscan_pick(avx2, 20), SG_FLATSCAN_SGEMM); /* not a multiple of 8 */
    assert_int_equal(sg_flatscan_pick(avx512, 20), SG_FLATSCAN_SGEMM);
    assert_int_equal(sg_flatscan_pick(avx2 & ~SG_CPU_FMA, 768), SG_FLATSCAN_SGEMM); /* no FMA */
    assert_int_equal(sg_flatscan_pick(SG_CPU_SSE3 | SG_CPU_AVX, 768), SG_FLATSCAN_SGEMM);
    assert_string_equal(sg_flatscan_kernel_name(SG_FLATSCAN_AVX2), "avx2");
    assert_string_equal(sg_flatscan_kernel_name(SG_FLATSCAN_AVX512), "avx512");
    assert_string_equal(sg_flatscan_kernel_name(SG_FLATSCAN_SGEMM), "sgemm");
}

static void test_flatscan_refuses_non_flat(void **state)
{
    (void)state;
    char err[512], path[512];
    char *dir = tu_mkdtemp();
    snprintf(path, sizeof(path), "%s/hnsw.index", dir);
    void *idx;
    float x[64 * 8];
    uint64_t s = 1;
    for (int i = 0; i < 64 * 8; ++i)
        x[i] = frand(&s);
    assert_int_equal(sg_fidx_create("HNSW8", 8, SG_FIDX_L2, &idx, err, sizeof(err)), 0);
    assert_int_equal(sg_fidx_add(idx, 64, x, err, sizeof(err)), 0);
    assert_int_equal(sg_fidx_write(idx, path, err, sizeof(err)), 0);
    sg_fidx_free(idx);
    sg_fidx_t ix;
    assert_int_equal(sg_fidx_open(path, NULL, &ix, err, sizeof(err)), 0);
    sg_flatscan_t fs;
    assert_int_equal(sg_flatscan_init(&fs, &ix), -1);
    sg_fidx_close(&ix);
    tu_rmtree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_task_once),
        cmocka_unit_test(test_lead_changes),
        cmocka_unit_test(test_encoder_same_with_any_threads),
        cmocka_unit_test(test_encoder_own_kernels_same_bits_with_any_threads),
        cmocka_unit_test(test_encoder_int8_same_bits_with_any_threads),
        cmocka_unit_test(test_xenc_same_with_any_threads),
        cmocka_unit_test(test_flatscan_ip),
        cmocka_unit_test(test_flatscan_l2),
        cmocka_unit_test(test_flatscan_tails),
        cmocka_unit_test(test_flatscan_small_index),
        cmocka_unit_test(test_flatscan_pick),
        cmocka_unit_test(test_flatscan_refuses_non_flat),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
