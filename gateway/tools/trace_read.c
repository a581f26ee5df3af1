/*
 * trace_read.c -- what searchgate-trace's commands share (trace_tool.h): reading a trace line by
 * line and the members of its lines.
 */
#include "trace_tool.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
