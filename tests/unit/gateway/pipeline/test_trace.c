/*
 * Unit tests: query traces (gateway/pipeline/trace.h) through their interface: a config with trace objects
 * (config.c reads them), sg_trace_configure(), requests handed over as the pipeline hands them, and the
 * lines the writer thread wrote, compared byte for byte. Also the buffer bound: records that do not
 * fit are dropped and counted, whole.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "config.h"
#include "dispatch.h"
#include "metrics.h"
#include "trace.h"

static char dir[64];

/* A config with one example route whose "trace" is `trace` (JSON text, paths relative to dir). */
static void load(sg_config_t *cfg, const char *trace)
{
    char json[2048], err[512];
    snprintf(json, sizeof(json), "{\"backends\":[{\"name\":\"r\",\"plugin\":\"example\",\"trace\":%s}]}", trace);
    if (sg_config_parse(cfg, json, strlen(json), dir, err, sizeof(err)) != 0)
        fail_msg("config: %s", err);
    assert_int_equal(sg_trace_configure(cfg, 0, err, sizeof(err)), 0);
}

static char *slurp(const char *name)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char buf[1 << 20]; /* the whole file: full.jsonl grows to 4000 lines of ~46 bytes */
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

typedef struct {
    const char *text;
    sg_blob_t *blob;
    int source;
} item_t;

static void item(const void *ctx, uint32_t d, sg_trace_item_t *out)
{
    const item_t *it = &((const item_t *)ctx)[d];
    *out = (sg_trace_item_t){it->text, (uint32_t)strlen(it->text), it->blob, it->source};
}

static sg_blob_t *blob(const char *const *docs, const double *scores, size_t n)
{
    sg_hit hits[8];
    for (size_t i = 0; i < n; ++i)
        hits[i] = (sg_hit){docs[i], strlen(docs[i]), scores[i]};
    sg_hits h = {hits, n};
    return sg_blob_from_hits(&h);
}

static void test_lines(void **state)
{
    (void)state;
    sg_config_t cfg;
    load(&cfg, "{\"path\":\"t.jsonl\",\"fields\":[\"request\",\"client\",\"route\",\"op\",\"topk\",\"params\",\"query\",\"hits\","
               "\"ids\",\"scores\",\"empty\",\"cache\",\"status\"]}");
    static const char *const d1[] = {"{\"id\":\"7\",\"contents\":\"\\\"T\\\"\\nText\",\"url\":\"\"}",
                                     "{\"contents\":\"x\",\"url\":\"https://u/1\",\"nested\":{\"id\":\"no\"}}",
                                     "{\"id\":12,\"contents\":\"y\"}", "{\"id\":\"\",\"url\":\"\",\"contents\":\"z\"}"};
    static const double s1[] = {2.5, 1.0, 0.25, -1e-300};
    static const char *const d2[] = {"{\"id\":\"a\",\"contents\":\"\\\"\\\"\\n\"}", "{\"id\":\"b\",\"contents\":\"  \"}"};
    static const double s2[] = {0.5, 0.5};
    item_t items[3] = {{"q \"one\"", blob(d1, s1, 4), SG_SRC_L1},
                       {"two", blob(d2, s2, 2), SG_SRC_FALLBACK},
                       {"three", blob(d1, s1, 0), SG_SRC_JOINED}};
    uint32_t slot[4] = {0, 1, 0, 2};
    sg_trace_event_t ev = {.request_id = "0-9",
                           .route = "r",
                           .fallback = "fb",
                           .client = "job \"a\"",
                           .topk = 4,
                           .params = "nprobe=8",
                           .n = 4,
                           .slot = slot,
                           .n_distinct = 3,
                           .status = 200,
                           .start_us = sg_now_us(),
                           .latency_us = 1500,
                           .item = item,
                           .ctx = items};
    sg_trace_request(cfg.backends[0].trace, NULL, &ev);
    for (int i = 0; i < 3; ++i)
        sg_blob_release(items[i].blob); /* the trace holds its own references */
    ev.status = 504;
    ev.error = "timeout";
    ev.n = 1;
    ev.n_distinct = 1;
    ev.request_id = "0-10";
    items[0].blob = NULL;
    items[0].source = SG_SRC_NONE;
    sg_trace_request(cfg.backends[0].trace, NULL, &ev);
    sg_trace_stop();
    const char *want =
        "{\"request\":\"0-9\",\"i\":0,\"n\":4,\"client\":\"job \\\"a\\\"\",\"route\":\"r\",\"op\":\"retrieve\",\"topk\":4,"
        "\"params\":\"nprobe=8\",\"query\":\"q \\\"one\\\"\",\"hits\":4,\"ids\":[\"7\",\"https://u/1\",12,null],"
        "\"scores\":[2.5,1.0,0.25,-1e-300],\"empty\":false,\"cache\":\"l1\",\"status\":200}\n"
        "{\"request\":\"0-9\",\"i\":1,\"n\":4,\"client\":\"job \\\"a\\\"\",\"route\":\"r\",\"op\":\"retrieve\",\"topk\":4,"
        "\"params\":\"nprobe=8\",\"query\":\"two\",\"hits\":2,\"ids\":[\"a\",\"b\"],\"scores\":[0.5,0.5],\"empty\":true,"
        "\"cache\":\"fallback\",\"fallback\":\"fb\",\"status\":200}\n"
        "{\"request\":\"0-9\",\"i\":2,\"n\":4,\"client\":\"job \\\"a\\\"\",\"route\":\"r\",\"op\":\"retrieve\",\"topk\":4,"
        "\"params\":\"nprobe=8\",\"query\":\"q \\\"one\\\"\",\"hits\":4,\"ids\":[\"7\",\"https://u/1\",12,null],"
        "\"scores\":[2.5,1.0,0.25,-1e-300],\"empty\":false,\"cache\":\"batch\",\"status\":200}\n"
        "{\"request\":\"0-9\",\"i\":3,\"n\":4,\"client\":\"job \\\"a\\\"\",\"route\":\"r\",\"op\":\"retrieve\",\"topk\":4,"
        "\"params\":\"nprobe=8\",\"query\":\"three\",\"hits\":0,\"ids\":[],\"scores\":[],\"empty\":false,\"cache\":\"joined\","
        "\"status\":200}\n"
        "{\"request\":\"0-10\",\"i\":0,\"n\":1,\"client\":\"job \\\"a\\\"\",\"route\":\"r\",\"op\":\"retrieve\",\"topk\":4,"
        "\"params\":\"nprobe=8\",\"query\":\"q \\\"one\\\"\",\"cache\":\"none\",\"status\":504,\"error\":\"timeout\"}\n";
    assert_string_equal(slurp("t.jsonl"), want);
    sg_config_free(&cfg);
}

/* A buffer of 4096 bytes holds a few records (each counts its blobs too); a burst of 2000 requests
 * outruns the writer, which wakes only every 50 ms or when the buffer is half full: what does not
 * fit is dropped whole and counted, the rest written. */
static void test_full_buffer_drops_whole_records(void **state)
{
    (void)state;
    sg_config_t cfg;
    load(&cfg, "{\"path\":\"full.jsonl\",\"buffer_bytes\":4096,\"fields\":[\"request\",\"query\"]}");
    static const char *const d[] = {"{\"id\":\"1\",\"contents\":\"a fairly long passage of text to take room in the buffer, "
                                    "a fairly long passage of text to take room in the buffer\"}"};
    static const double s[] = {1};
    item_t items[2] = {{"first", blob(d, s, 1), SG_SRC_BACKEND}, {"second", blob(d, s, 1), SG_SRC_BACKEND}};
    uint32_t slot[2] = {0, 1};
    sg_trace_event_t ev = {.request_id = "1-1",
                           .route = "r",
                           .client = "c",
                           .topk = 1,
                           .n = 2,
                           .slot = slot,
                           .n_distinct = 2,
                           .status = 200,
                           .start_us = sg_now_us(),
                           .item = item,
                           .ctx = items};
    for (int i = 0; i < 2000; ++i)
        sg_trace_request(cfg.backends[0].trace, NULL, &ev);
    char label[128];
    snprintf(label, sizeof(label), "trace=\"%s/full.jsonl\"", dir);
    uint64_t dropped = atomic_load(&sg_metrics_counter("searchgate_trace_dropped_lines_total", "", label)->v);
    sg_trace_stop();
    uint64_t lines = atomic_load(&sg_metrics_counter("searchgate_trace_lines_total", "", label)->v);
    assert_true(dropped > 0);
    assert_int_equal(dropped % 2, 0);
    assert_int_equal(lines + dropped, 4000);
    size_t newlines = 0;
    for (const char *p = slurp("full.jsonl"); *p != '\0'; ++p)
        newlines += *p == '\n';
    assert_int_equal(newlines, lines);
    for (int i = 0; i < 2; ++i)
        sg_blob_release(items[i].blob);
    sg_config_free(&cfg);
}

static void test_directory_and_default_fields(void **state)
{
    (void)state;
    sg_config_t cfg;
    char sub[96];
    snprintf(sub, sizeof(sub), "%s/traces", dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    load(&cfg, "{\"path\":\"traces\",\"sample\":1}"); /* an existing directory: <dir>/<route>.jsonl */
    assert_string_equal(cfg.backends[0].trace->path + strlen(dir), "/traces/r.jsonl");
    assert_int_equal(cfg.backends[0].trace->fields, SG_TRACE_F_DEFAULT);
    assert_int_equal(cfg.backends[0].trace->rotate_bytes, 268435456);
    assert_int_equal(cfg.backends[0].trace->buffer_bytes, 16 << 20);
    sg_trace_stop();
    sg_config_free(&cfg);
    assert_int_equal(access("/nonexistent", F_OK), -1);
}

int main(void)
{
    snprintf(dir, sizeof(dir), "/tmp/sg-unit-trace-XXXXXX");
    if (mkdtemp(dir) == NULL)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lines),
        cmocka_unit_test(test_full_buffer_drops_whole_records),
        cmocka_unit_test(test_directory_and_default_fields),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        rc = 1;
    sg_metrics_reset();
    return rc;
}
