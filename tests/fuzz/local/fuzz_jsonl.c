/*
 * fuzz_jsonl.c -- libFuzzer harness for the corpus row scanner of the local backend
 * (backends/local/store/jsonl.c: the strict JSON checker, the row offsets, top-level key lookup,
 * string decoding and the /access URL table), through sg_jsonl_open_buffer on the input as a
 * whole file. Checks: never crashes or leaks; a failure names "<fuzz>:<line>"; a success has one
 * row per non-blank line, in order, each the line without its surrounding whitespace, starting
 * with '{' (after JSON whitespace), ending with '}', accepted again by the checker; blank lines
 * only at the end; every key lookup lands inside its row; every row's "url" is found again by
 * sg_jsonl_find_url, as the last row with that (normalised) URL; decoding never grows a string.
 */
#include "fuzz_util.h"
#include "jsonl.h"

#include <cJSON.h>

static int is_blank_byte(char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}

/* As Python's json.loads reads the row (the last of duplicate keys wins), through cJSON: 1 with
 * the "url" string (malloc'ed) when it is one without NULs, 0 when the row has no string "url",
 * -1 when cJSON cannot tell (it rejects some rows Python accepts, e.g. lone surrogates). */
static int reference_url(const char *row, size_t len, char **out)
{
    *out = NULL;
    cJSON *o = cJSON_ParseWithLength(row, len);
    if (o == NULL)
        return -1;
    const cJSON *last = NULL;
    for (const cJSON *c = o->child; c != NULL; c = c->next)
        if (c->string != NULL && strcmp(c->string, "url") == 0)
            last = c;
    int r = 0;
    if (cJSON_IsString(last)) {
        *out = strdup(last->valuestring);
        r = 1;
    } else if (last != NULL && last->type == cJSON_Invalid) {
        r = -1;
    }
    cJSON_Delete(o);
    return r;
}

/* The normalised "url" string of a row, malloc'ed, or NULL. */
static char *url_of(const char *row, size_t len, size_t *out_len)
{
    const char *v;
    size_t vl;
    if (!sg_json_find_key(row, len, "url", &v, &vl))
        return NULL;
    FUZZ_CHECK(v >= row && v + vl <= row + len && vl > 0);
    if (v[0] != '"')
        return NULL;
    FUZZ_CHECK(sg_json_check_string(v, vl) == 0);
    size_t dl;
    char *d = sg_json_decode_string(v, vl, &dl);
    FUZZ_CHECK(dl + 2 <= vl);
    char *norm = malloc(dl * 2 + 1);
    FUZZ_CHECK(norm != NULL);
    *out_len = sg_jsonl_normalize_url(d, dl, norm);
    FUZZ_CHECK(*out_len <= dl * 2);
    free(d);
    return norm;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = fuzz_copy(data, size);
    sg_jsonl_t j;
    char err[512];
    err[0] = '\0';
    if (sg_jsonl_open_buffer(buf, size, "<fuzz>", 1, &j, err, sizeof(err)) != 0) {
        FUZZ_CHECK(strncmp(err, "<fuzz>:", 7) == 0);
        free(buf);
        return 0;
    }
    /* the lines, independently: row i is the i-th line, trimmed; blank lines only at the end */
    size_t pos = 0;
    uint64_t row = 0;
    int blank_seen = 0;
    while (pos < size) {
        const char *nl = memchr(buf + pos, '\n', size - pos);
        size_t end = nl != NULL ? (size_t)(nl - buf) : size;
        size_t a = pos, b = end;
        while (b > a && is_blank_byte(buf[b - 1]))
            --b;
        while (a < b && (buf[a] == ' ' || buf[a] == '\t'))
            ++a;
        int blank = 1;
        for (size_t i = pos; i < end; ++i)
            if (!is_blank_byte(buf[i]))
                blank = 0;
        if (blank) {
            blank_seen = 1;
        } else {
            FUZZ_CHECK(!blank_seen);
            FUZZ_CHECK(row < j.n_rows);
            const char *p;
            size_t len;
            sg_jsonl_row(&j, row, &p, &len);
            FUZZ_CHECK(p == buf + a && len == b - a);
            ++row;
        }
        pos = end + 1;
    }
    FUZZ_CHECK(row == j.n_rows);
    FUZZ_CHECK(j.offs[0] == 0 && j.offs[j.n_rows] <= (uint64_t)size + 1);
    uint64_t urls = 0;
    for (uint64_t r = 0; r < j.n_rows; ++r) {
        const char *p;
        size_t len;
        FUZZ_CHECK(j.offs[r] < j.offs[r + 1]);
        sg_jsonl_row(&j, r, &p, &len);
        FUZZ_CHECK(len >= 2 && memchr(p, '\n', len) == NULL && p[len - 1] == '}');
        size_t k = 0;
        while (k < len && (p[k] == ' ' || p[k] == '\t' || p[k] == '\r'))
            ++k;
        FUZZ_CHECK(k < len && p[k] == '{');
        const char *why;
        size_t at;
        FUZZ_CHECK(sg_json_check_object(p, len, &why, &at) == 0);
        const char *v;
        size_t vl;
        if (sg_json_find_key(p, len, "contents", &v, &vl))
            FUZZ_CHECK(v >= p && v + vl <= p + len && vl > 0);
        size_t ul;
        char *u = url_of(p, len, &ul);
        /* the same "url" as Python's dict of the row (where cJSON can tell, and no key or value
         * holds an escaped NUL, which cJSON cuts) */
        char *ref;
        const int rr = memmem(p, len, "\\u0000", 6) == NULL ? reference_url(p, len, &ref) : -1;
        if (rr >= 0) {
            FUZZ_CHECK((rr == 1) == (u != NULL));
            if (rr == 1) {
                char *norm = malloc(strlen(ref) * 2 + 1);
                FUZZ_CHECK(norm != NULL);
                size_t nl = sg_jsonl_normalize_url(ref, strlen(ref), norm);
                FUZZ_CHECK(nl == ul && memcmp(norm, u, ul) == 0);
                free(norm);
            }
            free(ref);
        }
        if (u == NULL)
            continue;
        ++urls;
        int64_t found = sg_jsonl_find_url(&j, u, ul);
        FUZZ_CHECK(found >= (int64_t)r && (uint64_t)found < j.n_rows);
        /* the row found has the same URL, and no later row has it */
        const char *fp;
        size_t fl, fu;
        sg_jsonl_row(&j, (uint64_t)found, &fp, &fl);
        char *u2 = url_of(fp, fl, &fu);
        FUZZ_CHECK(u2 != NULL && fu == ul && memcmp(u, u2, ul) == 0);
        free(u2);
        for (uint64_t r2 = (uint64_t)found + 1; r2 < j.n_rows; ++r2) {
            sg_jsonl_row(&j, r2, &fp, &fl);
            u2 = url_of(fp, fl, &fu);
            FUZZ_CHECK(u2 == NULL || fu != ul || memcmp(u, u2, ul) != 0);
            free(u2);
        }
        free(u);
    }
    FUZZ_CHECK(j.n_urls <= urls);
    sg_jsonl_close(&j);
    free(buf);
    return 0;
}
