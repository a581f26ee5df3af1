/*
 * trace_main.c -- searchgate-trace: what a researcher does with the query traces the gateway
 * writes (docs/traces.md).
 *
 *   searchgate-trace summary [--top N] [--json] TRACE [TRACE...]
 *   searchgate-trace replay TRACE --url URL [--route R] [--rate N/s] [--batch recorded|single]
 *                           [--params recorded|none] [--concurrency N] [--timeout S] --out FILE
 *
 * This file has the command line and what both commands share (reading a trace); the commands are
 * trace_summary.c and trace_replay.c.
 */
#include "trace_tool.h"
#include "common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *fp)
{
    fprintf(fp, "usage: searchgate-trace summary [--top N] [--json] TRACE [TRACE...]\n"
                "       searchgate-trace replay TRACE --url URL [--route R] [--rate N/s] [--batch recorded|single]\n"
                "                               [--params recorded|none] [--concurrency N] [--timeout S] --out FILE\n"
                "\n"
                "summary  per client and route: queries, distinct queries, repeat rate, zero hits, empty observations,\n"
                "         errors, latency percentiles, cache outcomes, the most frequent queries. With several traces,\n"
                "         each is compared with the first: identical top-k, recall@k, queries whose top-1 changed.\n"
                "replay   sends a trace's /retrieve queries to URL (any Search-R1 /retrieve endpoint) as recorded\n"
                "         (same batches, same topk and search parameters) or one per request, and writes what came\n"
                "         back as a new trace.\n"
                "A TRACE of \"-\" is read from standard input (cat rotated pieces into it). See docs/traces.md.\n");
}

const char *sg__tool_str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

double sg__tool_num(const cJSON *o, const char *key, double def)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : def;
}

char *sg__tool_id_text(const cJSON *id)
{
    if (id == NULL || cJSON_IsNull(id))
        return NULL;
    char *t = cJSON_PrintUnformatted(id);
    if (t == NULL)
        abort();
    return t;
}

int sg__tool_read(const char *path, sg_tline_fn fn, void *ctx, uint64_t *malformed)
{
    FILE *fp = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
    if (fp == NULL) {
        fprintf(stderr, "searchgate-trace: cannot open %s: %s\n", path, strerror(errno));
        return -1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int rc = 0;
    while (rc == 0 && (n = getline(&line, &cap, fp)) >= 0) {
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = '\0';
        if (n == 0)
            continue;
        cJSON *o = cJSON_ParseWithLength(line, (size_t)n);
        if (!cJSON_IsObject(o))
            ++*malformed;
        else if (fn(ctx, o) != 0)
            rc = -1;
        cJSON_Delete(o);
    }
    if (ferror(fp)) {
        fprintf(stderr, "searchgate-trace: cannot read %s: %s\n", path, strerror(errno));
        rc = -1;
    }
    free(line);
    if (fp != stdin)
        fclose(fp);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "summary") == 0)
        return sg__tool_summary(argc - 1, argv + 1);
    if (strcmp(argv[1], "replay") == 0)
        return sg__tool_replay(argc - 1, argv + 1);
    fprintf(stderr, "searchgate-trace: unknown command \"%s\"\n", argv[1]);
    usage(stderr);
    return 2;
}
