/*
 * fuzz_request.c -- libFuzzer harness for the /retrieve and /access body parser
 * (gateway/http/request.c). Byte 0 picks /access (bit 0) and one of four limit sets (bits 1-2); the
 * rest is the body. Checks: never crashes or leaks; a failure is 400, 413 or 422 with a message;
 * a success stays within the limits (queries, bytes per query, topk; topk 0 for /access), lays
 * the queries out back to back in the arena without NULs, and means the same when re-encoded:
 * the parsed request written back as JSON parses again to exactly the same fields.
 */
#include "fuzz_util.h"
#include "request.h"

#include <cJSON.h>

static const sg_request_limits_t limit_sets[4] = {
    {16u << 20, 10000, 8192, 1000}, /* the defaults of configuration.md */
    {64, 2, 8, 3},                  /* everything tiny: every 413 path */
    {4096, 1, 4096, 1},
    {1u << 20, 100000, 1u << 20, 100000},
};

static void check_parsed(const sg_parsed_t *p, const sg_request_limits_t *lim, int is_access)
{
    FUZZ_CHECK(p->n <= lim->max_queries);
    FUZZ_CHECK(p->arena != NULL && p->off != NULL && p->len != NULL);
    size_t pos = 0;
    for (uint32_t i = 0; i < p->n; ++i) {
        FUZZ_CHECK(p->off[i] == pos);
        FUZZ_CHECK(p->len[i] <= lim->max_query_bytes);
        FUZZ_CHECK(memchr(p->arena + p->off[i], '\0', p->len[i]) == NULL);
        pos += p->len[i];
    }
    FUZZ_CHECK(p->arena[pos] == '\0');
    FUZZ_CHECK(p->topk <= lim->max_topk);
    if (is_access)
        FUZZ_CHECK(p->topk == 0);
    FUZZ_CHECK(p->return_scores == 0 || p->return_scores == 1);
}

/* The parsed request written back as JSON (cJSON escapes what needs escaping). */
static char *reencode(const sg_parsed_t *p, int is_access)
{
    cJSON *o = cJSON_CreateObject(), *list = cJSON_CreateArray();
    FUZZ_CHECK(o != NULL && list != NULL);
    char *q = malloc(p->n != 0 ? p->off[p->n - 1] + p->len[p->n - 1] + 1 : 1);
    FUZZ_CHECK(q != NULL);
    for (uint32_t i = 0; i < p->n; ++i) {
        memcpy(q, p->arena + p->off[i], p->len[i]);
        q[p->len[i]] = '\0';
        cJSON_AddItemToArray(list, cJSON_CreateString(q));
    }
    free(q);
    cJSON_AddItemToObject(o, is_access ? "urls" : "queries", list);
    if (!is_access && p->topk != 0)
        cJSON_AddNumberToObject(o, "topk", p->topk);
    cJSON_AddBoolToObject(o, "return_scores", p->return_scores);
    if (p->backend != NULL)
        cJSON_AddStringToObject(o, "backend", p->backend);
    char *s = cJSON_PrintUnformatted(o);
    FUZZ_CHECK(s != NULL);
    cJSON_Delete(o);
    return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const int is_access = data[0] & 1;
    const sg_request_limits_t *lim = &limit_sets[(data[0] >> 1) & 3];
    char *body = fuzz_copy(data + 1, size - 1);
    sg_parsed_t p;
    char err[256];
    err[0] = '\0';
    int st = sg_request_parse(body, size - 1, lim, is_access, &p, err, sizeof(err));
    if (st != 0) {
        FUZZ_CHECK(st == 400 || st == 413 || st == 422);
        FUZZ_CHECK(err[0] != '\0');
        FUZZ_CHECK(p.arena == NULL && p.off == NULL && p.len == NULL && p.backend == NULL && p.n == 0);
        free(body);
        return 0;
    }
    check_parsed(&p, lim, is_access);
    /* round trip, with limits that the re-encoding (escapes grow it) cannot exceed */
    char *again = reencode(&p, is_access);
    sg_request_limits_t wide = *lim;
    wide.max_body_bytes = strlen(again) + 1;
    sg_parsed_t p2;
    st = sg_request_parse(again, strlen(again), &wide, is_access, &p2, err, sizeof(err));
    if (st != 0) {
        fprintf(stderr, "re-encoded request rejected (%d: %s): %s\n", st, err, again);
        abort();
    }
    FUZZ_CHECK(p2.n == p.n && p2.topk == p.topk && p2.return_scores == p.return_scores);
    FUZZ_CHECK((p.backend == NULL) == (p2.backend == NULL));
    FUZZ_CHECK(p.backend == NULL || strcmp(p.backend, p2.backend) == 0);
    for (uint32_t i = 0; i < p.n; ++i)
        FUZZ_CHECK(p.len[i] == p2.len[i] && memcmp(p.arena + p.off[i], p2.arena + p2.off[i], p.len[i]) == 0);
    sg_parsed_free(&p2);
    free(again);
    sg_parsed_free(&p);
    free(body);
    return 0;
}
