/*
 * jsonl.c -- the row store of jsonl.h: mmap, sidecar build/reuse, a strict JSON syntax checker
 * that allocates nothing (so a 14 GB corpus is checked once at a few hundred MB/s without 21 M
 * parse trees), top-level key lookup and the URL table for /access.
 *
 * Sidecar layout (native little-endian uint64 words):
 *   [0] magic "SGJSONL\1"   [1] version 2   [2] flags (1 = URL table)   [3] file size
 *   [4] mtime s  [5] mtime ns  [6] st_dev  [7] st_ino  [8] rows  [9] content hash
 *   [10] URL table slots  [11] hash of words 0..10
 *   then rows + 1 offsets, then the URL table.
 * It is written to a temporary name and renamed into place, so readers never see half of one.
 */
#include "jsonl.h"
#include "e5_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SIDE_MAGIC 0x014C4E4F534A4753ull /* "SGJSONL\1" */
#define SIDE_VERSION 2                   /* 2: the URL table keeps the last "url" of a row */
#define SIDE_WORDS 12
#define MAX_DEPTH 256

/* ---- strict JSON checker ---- */

typedef struct st_jp_t {
    const unsigned char *p, *start, *end;
    const char *why;
} jp_t;

static int fail(jp_t *j, const char *why)
{
    if (j->why == NULL)
        j->why = why;
    return -1;
}

static void ws(jp_t *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        ++j->p;
}

static int hex4(const unsigned char *p, unsigned *v)
{
    *v = 0;
    for (int i = 0; i < 4; ++i) {
        unsigned c = p[i], d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            return -1;
        *v = *v << 4 | d;
    }
    return 0;
}

/* one UTF-8 sequence starting at a byte >= 0x80; returns its length or 0 */
static size_t utf8_seq(const unsigned char *p, const unsigned char *end)
{
    unsigned c = p[0];
    size_t n;
    unsigned min;
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
        min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        min = 0x10000;
    } else {
        return 0;
    }
    if ((size_t)(end - p) < n)
        return 0;
    unsigned cp = c & (0x3F >> (n - 1));
    for (size_t i = 1; i < n; ++i) {
        if ((p[i] & 0xC0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return n;
}

static int string(jp_t *j)
{
    ++j->p; /* opening quote */
    for (;;) {
        /* fast path: plain ASCII */
        while (j->p < j->end && *j->p >= 0x20 && *j->p < 0x80 && *j->p != '"' && *j->p != '\\')
            ++j->p;
        if (j->p >= j->end)
            return fail(j, "unterminated string");
        unsigned c = *j->p;
        if (c == '"') {
            ++j->p;
            return 0;
        }
        if (c < 0x20)
            return fail(j, "control character in a string");
        if (c == '\\') {
            if (j->end - j->p < 2)
                return fail(j, "unterminated string");
            unsigned e = j->p[1];
            if (e == 'u') {
                unsigned v;
                if (j->end - j->p < 6 || hex4(j->p + 2, &v) != 0)
                    return fail(j, "bad \\u escape");
                j->p += 6;
            } else if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't') {
                j->p += 2;
            } else {
                return fail(j, "bad escape in a string");
            }
            continue;
        }
        size_t n = utf8_seq(j->p, j->end);
        if (n == 0)
            return fail(j, "invalid UTF-8");
        j->p += n;
    }
}

static int number(jp_t *j)
{
    const unsigned char *p = j->p;
    if (p < j->end && *p == '-')
        ++p;
    if (p >= j->end)
        return fail(j, "bad number");
    if (*p == '0') {
        ++p;
    } else if (*p >= '1' && *p <= '9') {
        while (p < j->end && *p >= '0' && *p <= '9')
            ++p;
    } else {
        return fail(j, "unexpected character");
    }
    if (p < j->end && *p == '.') {
        ++p;
        if (p >= j->end || *p < '0' || *p > '9')
            return fail(j, "bad number");
        while (p < j->end && *p >= '0' && *p <= '9')
            ++p;
    }
    if (p < j->end && (*p == 'e' || *p == 'E')) {
        ++p;
        if (p < j->end && (*p == '+' || *p == '-'))
            ++p;
        if (p >= j->end || *p < '0' || *p > '9')
            return fail(j, "bad number");
        while (p < j->end && *p >= '0' && *p <= '9')
            ++p;
    }
    j->p = p;
    return 0;
}

static int literal(jp_t *j, const char *lit)
{
    size_t n = strlen(lit);
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, lit, n) != 0)
        return fail(j, "unexpected character");
    j->p += n;
    return 0;
}

static int value(jp_t *j, int depth)
{
    ws(j);
    if (j->p >= j->end)
        return fail(j, "unexpected end of line");
    if (depth > MAX_DEPTH)
        return fail(j, "nested too deeply");
    switch (*j->p) {
    case '"':
        return string(j);
    case '{':
        ++j->p;
        ws(j);
        if (j->p < j->end && *j->p == '}') {
            ++j->p;
            return 0;
        }
        for (;;) {
            ws(j);
            if (j->p >= j->end || *j->p != '"')
                return fail(j, "expected a string key");
            if (string(j) != 0)
                return -1;
            ws(j);
            if (j->p >= j->end || *j->p != ':')
                return fail(j, "expected ':'");
            ++j->p;
            if (value(j, depth + 1) != 0)
                return -1;
            ws(j);
            if (j->p < j->end && *j->p == ',') {
                ++j->p;
                continue;
            }
            if (j->p < j->end && *j->p == '}') {
                ++j->p;
                return 0;
            }
            return fail(j, "expected ',' or '}'");
        }
    case '[':
        ++j->p;
        ws(j);
        if (j->p < j->end && *j->p == ']') {
            ++j->p;
            return 0;
        }
        for (;;) {
            if (value(j, depth + 1) != 0)
                return -1;
            ws(j);
            if (j->p < j->end && *j->p == ',') {
                ++j->p;
                continue;
            }
            if (j->p < j->end && *j->p == ']') {
                ++j->p;
                return 0;
            }
            return fail(j, "expected ',' or ']'");
        }
    case 't':
        return literal(j, "true");
    case 'f':
        return literal(j, "false");
    case 'n':
        return literal(j, "null");
    default:
        return number(j);
    }
}

int sg_json_check_object(const char *p, size_t len, const char **why, size_t *at)
{
    jp_t j = {(const unsigned char *)p, (const unsigned char *)p, (const unsigned char *)p + len, NULL};
    ws(&j);
    if (j.p >= j.end || *j.p != '{') {
        *why = "not a JSON object";
        *at = (size_t)(j.p - j.start);
        return -1;
    }
    if (value(&j, 0) != 0) {
        *why = j.why;
        *at = (size_t)(j.p - j.start);
        return -1;
    }
    ws(&j);
    if (j.p != j.end) {
        *why = "text after the object";
        *at = (size_t)(j.p - j.start);
        return -1;
    }
    return 0;
}

int sg_json_check_string(const char *p, size_t len)
{
    jp_t j = {(const unsigned char *)p, (const unsigned char *)p, (const unsigned char *)p + len, NULL};
    ws(&j);
    if (j.p >= j.end || *j.p != '"' || string(&j) != 0)
        return -1;
    ws(&j);
    return j.p == j.end ? 0 : -1;
}

char *sg_json_decode_string(const char *s, size_t len, size_t *out_len)
{
    char *o = malloc(len + 1);
    if (o == NULL)
        abort();
    size_t n = 0;
    const unsigned char *p = (const unsigned char *)s + 1, *end = (const unsigned char *)s + (len > 0 ? len - 1 : 0);
    while (p < end) {
        if (*p != '\\') {
            o[n++] = (char)*p++;
            continue;
        }
        unsigned e = p[1];
        p += 2;
        switch (e) {
        case 'b':
            o[n++] = '\b';
            break;
        case 'f':
            o[n++] = '\f';
            break;
        case 'n':
            o[n++] = '\n';
            break;
        case 'r':
            o[n++] = '\r';
            break;
        case 't':
            o[n++] = '\t';
            break;
        case 'u': {
            unsigned v = 0;
            if (end - p < 4 || hex4(p, &v) != 0)
                break;
            p += 4;
            if (v >= 0xD800 && v < 0xDC00 && end - p >= 6 && p[0] == '\\' && p[1] == 'u') {
                unsigned lo;
                if (hex4(p + 2, &lo) == 0 && lo >= 0xDC00 && lo < 0xE000) {
                    v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
                    p += 6;
                }
            }
            if (v >= 0xD800 && v < 0xE000)
                v = 0xFFFD; /* lone surrogate */
            /* a \uXXXX escape (6 bytes) never needs more than 4 UTF-8 bytes, a pair (12) 4 */
            if (v < 0x80) {
                o[n++] = (char)v;
            } else if (v < 0x800) {
                o[n++] = (char)(0xC0 | (v >> 6));
                o[n++] = (char)(0x80 | (v & 0x3F));
            } else if (v < 0x10000) {
                o[n++] = (char)(0xE0 | (v >> 12));
                o[n++] = (char)(0x80 | ((v >> 6) & 0x3F));
                o[n++] = (char)(0x80 | (v & 0x3F));
            } else {
                o[n++] = (char)(0xF0 | (v >> 18));
                o[n++] = (char)(0x80 | ((v >> 12) & 0x3F));
                o[n++] = (char)(0x80 | ((v >> 6) & 0x3F));
                o[n++] = (char)(0x80 | (v & 0x3F));
            }
            break;
        }
        default: /* " \ / */
            o[n++] = (char)e;
        }
    }
    o[n] = '\0';
    *out_len = n;
    return o;
}

int sg_json_find_key(const char *p, size_t len, const char *key, const char **val, size_t *val_len)
{
    jp_t j = {(const unsigned char *)p, (const unsigned char *)p, (const unsigned char *)p + len, NULL};
    size_t kl = strlen(key);
    ws(&j);
    if (j.p >= j.end || *j.p != '{')
        return 0;
    ++j.p;
    int found = 0; /* the last occurrence wins, as in Python's json.loads */
    for (;;) {
        ws(&j);
        if (j.p >= j.end || *j.p != '"')
            return found;
        const unsigned char *ks = j.p;
        if (string(&j) != 0)
            return found;
        size_t klen = (size_t)(j.p - ks);
        int match;
        if (memchr(ks, '\\', klen) != NULL) {
            size_t dl;
            char *d = sg_json_decode_string((const char *)ks, klen, &dl);
            match = dl == kl && memcmp(d, key, kl) == 0;
            free(d);
        } else {
            match = klen == kl + 2 && memcmp(ks + 1, key, kl) == 0;
        }
        ws(&j);
        if (j.p >= j.end || *j.p != ':')
            return found;
        ++j.p;
        ws(&j);
        const unsigned char *vs = j.p;
        if (value(&j, 1) != 0)
            return found;
        if (match) {
            *val = (const char *)vs;
            *val_len = (size_t)(j.p - vs);
            found = 1;
        }
        ws(&j);
        if (j.p < j.end && *j.p == ',') {
            ++j.p;
            continue;
        }
        return found;
    }
}

size_t sg_jsonl_normalize_url(const char *url, size_t len, char *out)
{
    static const char from[] = "index.php/", to[] = "index.php?title=";
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        if (len - i >= sizeof(from) - 1 && memcmp(url + i, from, sizeof(from) - 1) == 0) {
            memcpy(out + n, to, sizeof(to) - 1);
            n += sizeof(to) - 1;
            i += sizeof(from) - 1;
        } else {
            out[n++] = url[i++];
        }
    }
    out[n] = '\0';
    return n;
}

/* ---- rows ---- */

void sg_jsonl_row(const sg_jsonl_t *j, uint64_t row, const char **p, size_t *len)
{
    uint64_t a = j->offs[row], b = j->offs[row + 1];
    if (b > j->size + 1 || a > b) { /* a damaged sidecar: never read outside the mapping */
        *p = j->data;
        *len = 0;
        return;
    }
    if (b > j->size)
        b = j->size;
    const char *s = j->data + a, *e = j->data + b;
    while (e > s && (e[-1] == '\n' || e[-1] == '\r' || e[-1] == ' ' || e[-1] == '\t'))
        --e;
    while (s < e && (*s == ' ' || *s == '\t'))
        ++s;
    *p = s;
    *len = (size_t)(e - s);
}

/* the normalised "url" of a row, malloc'ed; NULL when it has none */
static char *row_url(const sg_jsonl_t *j, uint64_t row, size_t *len)
{
    const char *p, *v;
    size_t n, vl;
    sg_jsonl_row(j, row, &p, &n);
    if (!sg_json_find_key(p, n, "url", &v, &vl) || vl < 2 || v[0] != '"')
        return NULL;
    size_t dl;
    char *d = sg_json_decode_string(v, vl, &dl);
    char *norm = malloc(dl * 2 + 1);
    if (norm == NULL)
        abort();
    *len = sg_jsonl_normalize_url(d, dl, norm);
    free(d);
    return norm;
}

static uint64_t url_hash(const char *s, size_t n)
{
    return sg__e5_hash(0x75726c73ull, s, n);
}

int64_t sg_jsonl_find_url(const sg_jsonl_t *j, const char *url, size_t len)
{
    if (j->table == NULL)
        return -1;
    char stack[1024];
    char *norm = len * 2 + 1 <= sizeof(stack) ? stack : malloc(len * 2 + 1);
    if (norm == NULL)
        return -1;
    size_t nl = sg_jsonl_normalize_url(url, len, norm);
    uint64_t h = url_hash(norm, nl);
    uint32_t tag = (uint32_t)(h >> 32);
    int64_t found = -1;
    for (uint64_t i = h & j->table_mask;; i = (i + 1) & j->table_mask) {
        uint64_t e = j->table[i];
        if (e == 0)
            break;
        if ((uint32_t)(e >> 32) != tag)
            continue;
        uint64_t row = (e & 0xFFFFFFFFull) - 1;
        if (row >= j->n_rows)
            continue;
        size_t rl;
        char *ru = row_url(j, row, &rl);
        int eq = ru != NULL && rl == nl && memcmp(ru, norm, nl) == 0;
        free(ru);
        if (eq) {
            found = (int64_t)row;
            break;
        }
    }
    if (norm != stack)
        free(norm);
    return found;
}

/* ---- sidecar ---- */

static uint64_t words_hash(const uint64_t *w)
{
    return sg__e5_hash(0x5143ull, w, (SIDE_WORDS - 1) * sizeof(uint64_t));
}

static char *side_path_for(const char *path, const char *cache_dir)
{
    size_t n;
    char *p;
    if (cache_dir == NULL || cache_dir[0] == '\0') {
        n = strlen(path) + 8;
        p = malloc(n);
        if (p == NULL)
            abort();
        snprintf(p, n, "%s.sgrows", path);
        return p;
    }
    char *real = realpath(path, NULL);
    const char *src = real != NULL ? real : path;
    const char *base = strrchr(src, '/');
    base = base != NULL ? base + 1 : src;
    uint64_t h = sg__e5_hash(0x646972ull, src, strlen(src));
    n = strlen(cache_dir) + strlen(base) + 40;
    p = malloc(n);
    if (p == NULL)
        abort();
    snprintf(p, n, "%s/%s-%016llx.sgrows", cache_dir, base, (unsigned long long)h);
    free(real);
    return p;
}

static void stat_words(const struct stat *st, uint64_t *w)
{
    w[3] = (uint64_t)st->st_size;
    w[4] = (uint64_t)st->st_mtim.tv_sec;
    w[5] = (uint64_t)st->st_mtim.tv_nsec;
    w[6] = (uint64_t)st->st_dev;
    w[7] = (uint64_t)st->st_ino;
}

/* Maps an existing sidecar if it belongs to this very file. */
static int try_reuse(sg_jsonl_t *j, const struct stat *st, int want_table)
{
    int fd = open(j->side_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    struct stat ss;
    uint64_t w[SIDE_WORDS];
    if (fstat(fd, &ss) != 0 || (size_t)ss.st_size < sizeof(w) || pread(fd, w, sizeof(w), 0) != (ssize_t)sizeof(w)) {
        close(fd);
        return -1;
    }
    uint64_t want[SIDE_WORDS];
    stat_words(st, want);
    int ok = w[0] == SIDE_MAGIC && w[1] == SIDE_VERSION && w[11] == words_hash(w) && memcmp(w + 3, want + 3, 5 * 8) == 0 &&
             (!want_table || (w[2] & 1)) && w[8] < (1ull << 40) && w[10] < (1ull << 40) &&
             (uint64_t)ss.st_size == sizeof(w) + 8 * (w[8] + 1) + 8 * ((w[2] & 1) ? w[10] : 0);
    if (!ok) {
        close(fd);
        return -1;
    }
    void *m = mmap(NULL, (size_t)ss.st_size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return -1;
    j->side = m;
    j->side_size = (size_t)ss.st_size;
    j->n_rows = w[8];
    j->content_hash = w[9];
    j->offs = (const uint64_t *)m + SIDE_WORDS;
    if ((w[2] & 1) && want_table) {
        j->table = j->offs + w[8] + 1;
        j->table_mask = w[10] - 1;
    }
    if (j->offs[0] != 0 || j->offs[j->n_rows] > (uint64_t)j->size + 1) {
        munmap(m, j->side_size);
        j->side = NULL;
        j->table = NULL;
        return -1;
    }
    if (j->table != NULL) /* the count is not stored: the start-up log and its warning need it */
        for (uint64_t i = 0; i <= j->table_mask; ++i)
            j->n_urls += j->table[i] != 0;
    j->side_reused = 1;
    return 0;
}

typedef struct st_u64vec_t {
    uint64_t *v;
    size_t n, cap;
} u64vec_t;

static void push(u64vec_t *b, uint64_t x)
{
    if (b->n == b->cap) {
        b->cap = b->cap != 0 ? b->cap * 2 : 1 << 16;
        b->v = realloc(b->v, b->cap * sizeof(uint64_t));
        if (b->v == NULL)
            abort();
    }
    b->v[b->n++] = x;
}

static int is_blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; ++i)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
            return 0;
    return 1;
}

/* Scans the file: offsets, syntax check, content hash, URL table. The result lives in one
 * malloc'ed block laid out like the sidecar, grown in place as rows are found (the header words
 * first), so the offsets exist once: a large glibc block grows by mremap, not by copying. The
 * scanned part of the file is dropped from the process's resident set as the scan moves on (it
 * stays in the page cache): the first start of a 14 GB corpus does not peak at 14 GB of RSS. */
static int build(sg_jsonl_t *j, const struct stat *st, int want_table, char *err, size_t err_size)
{
    u64vec_t offs = {0};
    for (int i = 0; i < SIDE_WORDS; ++i)
        push(&offs, 0);
    uint64_t hash = 0x6a736f6eull;
    const char *d = j->data;
    size_t size = j->size, pos = 0, dropped = 0;
    const size_t drop_step = (size_t)64 << 20;
    uint64_t line = 0;
    /* the content hash runs over 1 MiB blocks */
    size_t hashed = 0;
    while (pos < size) {
        const char *nl = memchr(d + pos, '\n', size - pos);
        size_t end = nl != NULL ? (size_t)(nl - d) : size;
        size_t len = end - pos;
        ++line;
        if (is_blank(d + pos, len)) {
            /* blank: allowed only when nothing but blank lines follows */
            size_t q = end;
            while (q < size && (d[q] == '\n' || d[q] == '\r' || d[q] == ' ' || d[q] == '\t'))
                ++q;
            if (q < size) {
                snprintf(err, err_size, "%s:%llu: empty line (row %llu) before the end of the file", j->path,
                         (unsigned long long)line, (unsigned long long)(offs.n - SIDE_WORDS));
                free(offs.v);
                return -1;
            }
            break;
        }
        const char *why;
        size_t at;
        if (sg_json_check_object(d + pos, len, &why, &at) != 0) {
            snprintf(err, err_size, "%s:%llu: row %llu is not one JSON object: %s at column %zu", j->path, (unsigned long long)line,
                     (unsigned long long)(offs.n - SIDE_WORDS), why, at + 1);
            free(offs.v);
            return -1;
        }
        push(&offs, pos);
        pos = end + 1;
        while (hashed + (1u << 20) <= pos && hashed + (1u << 20) <= size) {
            hash = sg__e5_hash(hash, d + hashed, 1u << 20);
            hashed += 1u << 20;
        }
        if (hashed >= dropped + drop_step) { /* d is page-aligned (mmap); both ends are multiples of 1 MiB */
            (void)madvise((void *)(d + dropped), hashed - dropped, MADV_DONTNEED);
            dropped = hashed;
        }
    }
    if (hashed < size)
        hash = sg__e5_hash(hash, d + hashed, size - hashed);
    uint64_t n = offs.n - SIDE_WORDS;
    push(&offs, pos); /* one past the last row's '\n' (size + 1 when it had none) */
    uint64_t slots = 0;
    if (want_table) {
        if (n >= 0xFFFFFFFFull) {
            snprintf(err, err_size, "%s: too many rows for the URL table", j->path);
            free(offs.v);
            return -1;
        }
        slots = 16;
        while (slots < n * 2)
            slots *= 2;
    }
    size_t total = SIDE_WORDS * 8 + 8 * (size_t)(n + 1) + 8 * (size_t)slots;
    uint64_t *blk = realloc(offs.v, total);
    if (blk == NULL) {
        snprintf(err, err_size, "%s: out of memory for %llu row offsets", j->path, (unsigned long long)n);
        free(offs.v);
        return -1;
    }
    memset(blk + SIDE_WORDS + n + 1, 0, 8 * (size_t)slots);
    blk[0] = SIDE_MAGIC;
    blk[1] = SIDE_VERSION;
    blk[2] = want_table ? 1 : 0;
    stat_words(st, blk);
    blk[8] = n;
    blk[9] = hash;
    blk[10] = slots;
    blk[11] = words_hash(blk);
    j->side = blk;
    j->side_size = total;
    j->side_malloced = 1;
    j->n_rows = n;
    j->content_hash = hash;
    j->offs = blk + SIDE_WORDS;
    if (want_table) {
        uint64_t *table = blk + SIDE_WORDS + n + 1;
        j->table = table;
        j->table_mask = slots - 1;
        for (uint64_t r = 0; r < n; ++r) {
            size_t ul;
            char *u = row_url(j, r, &ul);
            if (u == NULL)
                continue;
            uint64_t h = url_hash(u, ul);
            uint32_t tag = (uint32_t)(h >> 32);
            for (uint64_t i = h & j->table_mask;; i = (i + 1) & j->table_mask) {
                uint64_t e = table[i];
                if (e == 0) {
                    table[i] = (uint64_t)tag << 32 | (r + 1);
                    j->n_urls++;
                    break;
                }
                if ((uint32_t)(e >> 32) == tag) {
                    size_t ol;
                    char *o = row_url(j, (e & 0xFFFFFFFFull) - 1, &ol);
                    int same = o != NULL && ol == ul && memcmp(o, u, ul) == 0;
                    free(o);
                    if (same) { /* a later duplicate wins, as in the Python dict */
                        table[i] = (uint64_t)tag << 32 | (r + 1);
                        break;
                    }
                }
            }
            free(u);
        }
    }
    return 0;
}

/* Writes the malloc'ed sidecar block to disk and maps it instead; keeps it in memory on failure. */
static void persist(sg_jsonl_t *j)
{
    size_t n = strlen(j->side_path) + 32;
    char *tmp = malloc(n);
    if (tmp == NULL)
        abort();
    snprintf(tmp, n, "%s.tmp.%ld", j->side_path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(j->side_note, sizeof(j->side_note), "cannot write %s: %s", j->side_path, strerror(errno));
        free(tmp);
        return;
    }
    const char *p = j->side;
    size_t left = j->side_size;
    int ok = 1;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w <= 0) {
            ok = 0;
            break;
        }
        p += w;
        left -= (size_t)w;
    }
    if (close(fd) != 0)
        ok = 0;
    if (!ok || rename(tmp, j->side_path) != 0) {
        snprintf(j->side_note, sizeof(j->side_note), "cannot write %s: %s", j->side_path, strerror(errno));
        unlink(tmp);
        free(tmp);
        return;
    }
    free(tmp);
    /* switch to the file mapping so the offsets live in the page cache, not the heap */
    fd = open(j->side_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    void *m = mmap(NULL, j->side_size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return;
    size_t table_off = j->table != NULL ? (size_t)(j->table - (const uint64_t *)j->side) : 0;
    free(j->side);
    j->side = m;
    j->side_malloced = 0;
    j->offs = (const uint64_t *)m + SIDE_WORDS;
    if (j->table != NULL)
        j->table = (const uint64_t *)m + table_off;
}

int sg_jsonl_open(const char *path, const sg_jsonl_opts_t *opts, sg_jsonl_t *j, char *err, size_t err_size)
{
    memset(j, 0, sizeof(*j));
    j->path = strdup(path);
    if (j->path == NULL)
        abort();
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, err_size, "%s: cannot open: %s", path, strerror(errno));
        sg_jsonl_close(j);
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, err_size, "%s: not a regular file", path);
        close(fd);
        sg_jsonl_close(j);
        return -1;
    }
    j->size = (size_t)st.st_size;
    if (j->size > 0) {
        void *m = mmap(NULL, j->size, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
            snprintf(err, err_size, "%s: mmap failed: %s", path, strerror(errno));
            close(fd);
            sg_jsonl_close(j);
            return -1;
        }
        j->data = m;
    } else {
        j->data = "";
    }
    close(fd);
    if (opts != NULL && opts->cache_dir != NULL)
        (void)mkdir(opts->cache_dir, 0755);
    j->side_path = side_path_for(path, opts != NULL ? opts->cache_dir : NULL);
    int want_table = opts != NULL && opts->url_table;
    if (try_reuse(j, &st, want_table) == 0)
        return 0;
    if (build(j, &st, want_table, err, err_size) != 0) {
        sg_jsonl_close(j);
        return -1;
    }
    persist(j);
    return 0;
}

int sg_jsonl_open_buffer(const char *data, size_t size, const char *name, int url_table, sg_jsonl_t *j, char *err, size_t err_size)
{
    memset(j, 0, sizeof(*j));
    j->path = strdup(name);
    if (j->path == NULL)
        abort();
    j->data = size > 0 ? data : "";
    j->size = size;
    j->data_borrowed = 1;
    struct stat st;
    memset(&st, 0, sizeof(st));
    st.st_size = (off_t)size;
    if (build(j, &st, url_table, err, err_size) != 0) {
        sg_jsonl_close(j);
        return -1;
    }
    snprintf(j->side_note, sizeof(j->side_note), "in memory only: the rows are not a file");
    return 0;
}

void sg_jsonl_close(sg_jsonl_t *j)
{
    if (j->side != NULL) {
        if (j->side_malloced)
            free(j->side);
        else
            munmap(j->side, j->side_size);
    }
    if (j->data != NULL && j->size > 0 && !j->data_borrowed)
        munmap((void *)j->data, j->size);
    free(j->path);
    free(j->side_path);
    memset(j, 0, sizeof(*j));
}
