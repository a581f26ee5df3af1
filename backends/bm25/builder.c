/*
 * builder.c -- streaming bm25 index construction (builder.h).
 *
 * Pass 1 reads the corpus line by line (plain or gzip, through zlib), writes each DOC JSON to
 * docs.bin and its entry to docs.idx as it goes, and inverts the analyzed text into an in-memory
 * hash of terms -> varint posting buffers. When that reaches the memory budget it is sorted by
 * term and spilled as a run file (runs hold consecutive document ranges). Pass 2 merges the runs
 * term by term into terms.bin and postings.bin; the segments of one term are concatenated in run
 * order, re-basing the first delta of each. Memory stays within the budget plus one line and the
 * largest posting list of one run, whatever the corpus size.
 *
 * The files are written as NAME.tmp with a zeroed header, which is filled in (CRCs, build id)
 * once everything is known; then each is renamed into place, bm25.meta last. The output is a
 * function of the corpus and the options only (not of the budget or the clock).
 */
#include "builder.h"
#include "format.h"
#include "index.h"

#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <utf8proc.h>
#include <zlib.h>

static void *xmalloc(size_t n)
{
    void *p = malloc(n != 0 ? n : 1);
    if (p == NULL)
        abort();
    return p;
}

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n != 0 ? n : 1);
    if (q == NULL)
        abort();
    return q;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int errf(char *err, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int errf(char *err, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- JSON ---- */

static void put(char **buf, size_t *len, size_t *cap, const void *p, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t c = *cap != 0 ? *cap : 256;
        while (*len + n + 1 > c)
            c *= 2;
        *buf = xrealloc(*buf, c);
        *cap = c;
    }
    memcpy(*buf + *len, p, n);
    *len += n;
    (*buf)[*len] = '\0';
}

static void puts_(char **buf, size_t *len, size_t *cap, const char *s)
{
    put(buf, len, cap, s, strlen(s));
}

void sg_bm25_json_escape(char **buf, size_t *len, size_t *cap, const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && (unsigned char)s[j] >= 0x20 && s[j] != '"' && s[j] != '\\' && (unsigned char)s[j] < 0x80)
            ++j;
        if (j > i)
            put(buf, len, cap, s + i, j - i);
        i = j;
        if (i >= n)
            break;
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x80) {
            utf8proc_int32_t cp;
            utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
            if (k <= 0) {
                put(buf, len, cap, "\xEF\xBF\xBD", 3); /* U+FFFD */
                i += 1;
            } else {
                put(buf, len, cap, s + i, (size_t)k);
                i += (size_t)k;
            }
            continue;
        }
        char esc[8];
        switch (c) {
        case '"':
            put(buf, len, cap, "\\\"", 2);
            break;
        case '\\':
            put(buf, len, cap, "\\\\", 2);
            break;
        case '\n':
            put(buf, len, cap, "\\n", 2);
            break;
        case '\r':
            put(buf, len, cap, "\\r", 2);
            break;
        case '\t':
            put(buf, len, cap, "\\t", 2);
            break;
        case '\b':
            put(buf, len, cap, "\\b", 2);
            break;
        case '\f':
            put(buf, len, cap, "\\f", 2);
            break;
        default:
            snprintf(esc, sizeof(esc), "\\u%04x", c);
            put(buf, len, cap, esc, 6);
            break;
        }
        ++i;
    }
}

/* ---- output files ---- */

typedef struct st_outfile_t {
    FILE *fp;
    int kind;
    char *tmp, *final;
    uint64_t len;
    uint32_t crc;
} outfile_t;

static int of_open(outfile_t *f, const char *dir, int kind, char *err, size_t n)
{
    memset(f, 0, sizeof(*f));
    f->kind = kind;
    size_t l = strlen(dir) + strlen(sg_bm25_file_names[kind - 1]) + 8;
    f->final = xmalloc(l);
    f->tmp = xmalloc(l);
    snprintf(f->final, l, "%s/%s", dir, sg_bm25_file_names[kind - 1]);
    snprintf(f->tmp, l, "%s/%s.tmp", dir, sg_bm25_file_names[kind - 1]);
    f->fp = fopen(f->tmp, "w+b");
    if (f->fp == NULL)
        return errf(err, n, "%s: cannot create: %s", f->tmp, strerror(errno));
    setvbuf(f->fp, NULL, _IOFBF, 1 << 20);
    static const char zero[SG_BM25_HEADER_SIZE];
    if (fwrite(zero, 1, sizeof(zero), f->fp) != sizeof(zero))
        return errf(err, n, "%s: write failed: %s", f->tmp, strerror(errno));
    return 0;
}

static int of_write(outfile_t *f, const void *p, size_t n, char *err, size_t en)
{
    if (n == 0)
        return 0;
    if (fwrite(p, 1, n, f->fp) != n)
        return errf(err, en, "%s: write failed: %s", f->tmp, strerror(errno));
    f->crc = sg_bm25_crc32(f->crc, p, n);
    f->len += n;
    return 0;
}

/* Writes the header and flushes the file to disk; the file stays at its .tmp name. */
static int of_finish(outfile_t *f, uint64_t build_id, char *err, size_t n)
{
    sg_bm25_header_t h;
    memset(&h, 0, sizeof(h));
    memcpy(h.magic, SG_BM25_MAGIC, 8);
    h.version = SG_BM25_FORMAT_VERSION;
    h.kind = (uint32_t)f->kind;
    h.payload_len = f->len;
    h.build_id = build_id;
    h.payload_crc = f->crc;
    h.header_size = SG_BM25_HEADER_SIZE;
    h.header_crc = sg_bm25_header_crc(&h);
    if (fflush(f->fp) != 0 || fseeko(f->fp, 0, SEEK_SET) != 0 || fwrite(&h, 1, sizeof(h), f->fp) != sizeof(h) ||
        fflush(f->fp) != 0 || fdatasync(fileno(f->fp)) != 0)
        return errf(err, n, "%s: write failed: %s", f->tmp, strerror(errno));
    int r = fclose(f->fp);
    f->fp = NULL;
    if (r != 0)
        return errf(err, n, "%s: write failed: %s", f->tmp, strerror(errno));
    return 0;
}

static void of_discard(outfile_t *f)
{
    if (f->fp != NULL) {
        fclose(f->fp);
        f->fp = NULL;
    }
    if (f->tmp != NULL)
        unlink(f->tmp);
    free(f->tmp);
    free(f->final);
    f->tmp = f->final = NULL;
}

/* ---- the in-memory inverted index of one run ---- */

typedef struct st_mterm_t {
    uint64_t hash;
    uint32_t str_off, str_len;
    uint32_t df;
    uint32_t last_doc; /* last document added, +1 (0 = none yet in this run) */
    uint32_t first_doc;
    uint32_t tf; /* within the current document */
    uint32_t plen, pcap;
    uint8_t *post;
} mterm_t;

typedef struct st_inv_t {
    mterm_t *terms;
    size_t n, cap;
    uint32_t *slots; /* term index + 1; 0 = empty */
    size_t nslots;
    char *strs;
    size_t strs_len, strs_cap;
    size_t post_bytes;   /* sum of pcap */
    uint32_t *doc_terms; /* terms of the current document */
    size_t n_doc_terms, doc_terms_cap;
} inv_t;

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; ++i)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static size_t inv_memory(const inv_t *v)
{
    return v->cap * sizeof(mterm_t) + v->nslots * sizeof(uint32_t) + v->strs_cap + v->post_bytes +
           v->doc_terms_cap * sizeof(uint32_t);
}

static void inv_grow_slots(inv_t *v)
{
    size_t ns = v->nslots != 0 ? v->nslots * 2 : 1 << 10;
    uint32_t *slots = calloc(ns, sizeof(*slots));
    if (slots == NULL)
        abort();
    for (size_t i = 0; i < v->n; ++i) {
        size_t j = v->terms[i].hash & (ns - 1);
        while (slots[j] != 0)
            j = (j + 1) & (ns - 1);
        slots[j] = (uint32_t)(i + 1);
    }
    free(v->slots);
    v->slots = slots;
    v->nslots = ns;
}

static mterm_t *inv_term(inv_t *v, const char *s, size_t len)
{
    if ((v->n + 1) * 2 > v->nslots)
        inv_grow_slots(v);
    uint64_t h = hash_bytes(s, len);
    size_t j = h & (v->nslots - 1);
    while (v->slots[j] != 0) {
        mterm_t *t = &v->terms[v->slots[j] - 1];
        if (t->hash == h && t->str_len == len && memcmp(v->strs + t->str_off, s, len) == 0)
            return t;
        j = (j + 1) & (v->nslots - 1);
    }
    if (v->n == v->cap) {
        v->cap = v->cap != 0 ? v->cap * 2 : 1 << 9;
        v->terms = xrealloc(v->terms, v->cap * sizeof(*v->terms));
    }
    if (v->strs_len + len > v->strs_cap) {
        size_t c = v->strs_cap != 0 ? v->strs_cap : 1 << 14;
        while (v->strs_len + len > c)
            c *= 2;
        v->strs = xrealloc(v->strs, c);
        v->strs_cap = c;
    }
    mterm_t *t = &v->terms[v->n];
    memset(t, 0, sizeof(*t));
    t->hash = h;
    t->str_off = (uint32_t)v->strs_len;
    t->str_len = (uint32_t)len;
    memcpy(v->strs + v->strs_len, s, len);
    v->strs_len += len;
    v->slots[j] = (uint32_t)(++v->n);
    return t;
}

static void inv_add_posting(inv_t *v, mterm_t *t, uint32_t doc)
{
    if (t->plen + 20 > t->pcap) {
        uint32_t c = t->pcap != 0 ? t->pcap * 2 : 16;
        v->post_bytes += c - t->pcap;
        t->post = xrealloc(t->post, c);
        t->pcap = c;
    }
    uint64_t delta = t->df == 0 ? doc : doc - (t->last_doc - 1);
    if (t->tf == 1) {
        t->plen += sg_bm25_put_varint(t->post + t->plen, delta << 1 | 1);
    } else {
        t->plen += sg_bm25_put_varint(t->post + t->plen, delta << 1);
        t->plen += sg_bm25_put_varint(t->post + t->plen, t->tf);
    }
    if (t->df == 0)
        t->first_doc = doc;
    ++t->df;
    t->last_doc = doc + 1;
    t->tf = 0;
}

/* Empties the run and gives its memory back (the budget counts allocated capacity). */
static void inv_reset(inv_t *v)
{
    for (size_t i = 0; i < v->n; ++i)
        free(v->terms[i].post);
    free(v->terms);
    free(v->slots);
    free(v->strs);
    v->terms = NULL;
    v->slots = NULL;
    v->strs = NULL;
    v->n = v->cap = v->nslots = v->strs_len = v->strs_cap = 0;
    v->post_bytes = 0;
}

static void inv_free(inv_t *v)
{
    inv_reset(v);
    free(v->doc_terms);
    memset(v, 0, sizeof(*v));
}

/* ---- runs ---- */

typedef struct st_run_hdr_t {
    uint32_t term_len, df, first_doc, last_doc, nbytes;
} run_hdr_t;

static int cmp_term_idx(const void *a, const void *b, void *arg)
{
    const inv_t *v = arg;
    const mterm_t *x = &v->terms[*(const uint32_t *)a], *y = &v->terms[*(const uint32_t *)b];
    int c = memcmp(v->strs + x->str_off, v->strs + y->str_off, x->str_len < y->str_len ? x->str_len : y->str_len);
    return c != 0 ? c : (x->str_len > y->str_len) - (x->str_len < y->str_len);
}

static int spill_run(inv_t *v, const char *path, char *err, size_t n)
{
    FILE *fp = fopen(path, "wb");
    if (fp == NULL)
        return errf(err, n, "%s: cannot create: %s", path, strerror(errno));
    setvbuf(fp, NULL, _IOFBF, 1 << 20);
    uint32_t *order = xmalloc(v->n * sizeof(*order));
    for (size_t i = 0; i < v->n; ++i)
        order[i] = (uint32_t)i;
    qsort_r(order, v->n, sizeof(*order), cmp_term_idx, v);
    int bad = 0;
    for (size_t i = 0; i < v->n && !bad; ++i) {
        const mterm_t *t = &v->terms[order[i]];
        run_hdr_t h = {t->str_len, t->df, t->first_doc, t->last_doc - 1, t->plen};
        bad = fwrite(&h, sizeof(h), 1, fp) != 1 || fwrite(v->strs + t->str_off, 1, t->str_len, fp) != t->str_len ||
              fwrite(t->post, 1, t->plen, fp) != t->plen;
    }
    free(order);
    if (fclose(fp) != 0 || bad)
        return errf(err, n, "%s: write failed: %s", path, strerror(errno));
    inv_reset(v);
    return 0;
}

typedef struct st_run_t {
    FILE *fp;
    char *path;
    int idx;
    int eof;
    run_hdr_t h;
    char *term;
    uint8_t *post;
    size_t term_cap, post_cap;
    uint64_t size, done; /* bytes, for progress */
} run_t;

static int run_next(run_t *r, char *err, size_t n)
{
    size_t got = fread(&r->h, 1, sizeof(r->h), r->fp);
    if (got == 0 && feof(r->fp)) {
        r->eof = 1;
        return 0;
    }
    if (got != sizeof(r->h))
        return errf(err, n, "%s: truncated run file", r->path);
    if (r->h.term_len + 1 > r->term_cap) {
        r->term_cap = r->h.term_len + 1;
        r->term = xrealloc(r->term, r->term_cap);
    }
    if (r->h.nbytes > r->post_cap) {
        r->post_cap = r->h.nbytes;
        r->post = xrealloc(r->post, r->post_cap);
    }
    if (fread(r->term, 1, r->h.term_len, r->fp) != r->h.term_len || fread(r->post, 1, r->h.nbytes, r->fp) != r->h.nbytes)
        return errf(err, n, "%s: truncated run file", r->path);
    r->done += sizeof(r->h) + r->h.term_len + r->h.nbytes;
    return 0;
}

static int run_cmp(const run_t *a, const run_t *b)
{
    int c = memcmp(a->term, b->term, a->h.term_len < b->h.term_len ? a->h.term_len : b->h.term_len);
    if (c == 0)
        c = (a->h.term_len > b->h.term_len) - (a->h.term_len < b->h.term_len);
    return c != 0 ? c : (a->idx > b->idx) - (a->idx < b->idx);
}

static void heap_down(run_t **h, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && run_cmp(h[l], h[m]) < 0)
            m = l;
        if (r < n && run_cmp(h[r], h[m]) < 0)
            m = r;
        if (m == i)
            return;
        run_t *t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

/* ---- progress ---- */

typedef struct st_progress_t {
    int on;
    double start, last;
    uint64_t total; /* bytes of input, 0 = unknown */
} progress_t;

static void human(char *out, size_t n, double v)
{
    const char *u[] = {"B", "KB", "MB", "GB", "TB"};
    int i = 0;
    while (v >= 1024 && i < 4) {
        v /= 1024;
        ++i;
    }
    snprintf(out, n, "%.1f %s", v, u[i]);
}

static void progress_draw(progress_t *p, const char *phase, uint64_t done, uint64_t total, uint64_t docs, int final)
{
    if (!p->on)
        return;
    double t = now_s();
    if (!final && t - p->last < 0.2)
        return;
    p->last = t;
    double el = t - p->start;
    char bar[33], sz[32];
    double frac = total > 0 ? (double)done / (double)total : 0;
    if (frac > 1)
        frac = 1;
    int fill = (int)(frac * 30);
    for (int i = 0; i < 30; ++i)
        bar[i] = i < fill ? '#' : '.';
    bar[30] = '\0';
    human(sz, sizeof(sz), (double)done);
    if (total > 0)
        fprintf(stderr, "\r%-8s [%s] %5.1f%%  %llu docs  %s  %.0f docs/s  %.1fs ", phase, bar, frac * 100, (unsigned long long)docs,
                sz, el > 0 ? (double)docs / el : 0.0, el);
    else
        fprintf(stderr, "\r%-8s %llu docs  %s  %.0f docs/s  %.1fs ", phase, (unsigned long long)docs, sz,
                el > 0 ? (double)docs / el : 0.0, el);
    if (final)
        fputc('\n', stderr);
    fflush(stderr);
}

/* ---- pass 1: the corpus ---- */

typedef struct st_reader_t {
    gzFile gz;
    char *buf;
    size_t cap, start, end;
    int eof;
    uint64_t bytes; /* uncompressed bytes consumed */
} reader_t;

/* Returns the next line (without '\n', NUL-terminated, valid until the next call) or NULL at EOF. */
static char *read_line(reader_t *r, size_t *len, int *error)
{
    for (;;) {
        char *nl = r->end > r->start ? memchr(r->buf + r->start, '\n', r->end - r->start) : NULL;
        if (nl != NULL) {
            char *line = r->buf + r->start;
            *len = (size_t)(nl - line);
            *nl = '\0';
            r->start += *len + 1;
            r->bytes += *len + 1;
            return line;
        }
        if (r->eof) {
            if (r->end == r->start)
                return NULL;
            if (r->end == r->cap)
                r->buf = xrealloc(r->buf, ++r->cap);
            char *line = r->buf + r->start;
            *len = r->end - r->start;
            line[*len] = '\0';
            r->bytes += *len;
            r->start = r->end;
            return line;
        }
        /* compact, grow, read more */
        if (r->start > 0) {
            memmove(r->buf, r->buf + r->start, r->end - r->start);
            r->end -= r->start;
            r->start = 0;
        }
        if (r->cap - r->end < (1 << 16)) {
            r->cap = r->cap != 0 ? r->cap * 2 : 1 << 22;
            r->buf = xrealloc(r->buf, r->cap);
        }
        size_t want = r->cap - r->end - 1;
        if (want > (1u << 30))
            want = 1u << 30;
        int got = gzread(r->gz, r->buf + r->end, (unsigned)want);
        if (got < 0) {
            *error = 1;
            return NULL;
        }
        if (got == 0)
            r->eof = 1;
        r->end += (size_t)got;
    }
}

static int is_blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; ++i)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
            return 0;
    return 1;
}

typedef struct st_build_t {
    const sg_bm25_build_opts_t *o;
    outfile_t out[SG_BM25_NUM_FILES];
    char **runs;
    size_t n_runs, run_seq, runs_spilled;
    inv_t inv;
    sg_bm25_meta_t meta;
    progress_t prog;
    char *doc;
    size_t doc_len, doc_cap;
} build_t;

static char *run_path(build_t *b, size_t i)
{
    const char *dir = b->o->tmp_dir != NULL ? b->o->tmp_dir : b->o->out_dir;
    size_t l = strlen(dir) + 64;
    char *p = xmalloc(l);
    if (i == SIZE_MAX)
        snprintf(p, l, "%s/bm25-terms-%d.tmp", dir, (int)getpid());
    else
        snprintf(p, l, "%s/bm25-run-%d-%zu.tmp", dir, (int)getpid(), i);
    return p;
}

static int flush_run(build_t *b, char *err, size_t n)
{
    b->runs = xrealloc(b->runs, (b->n_runs + 1) * sizeof(*b->runs));
    b->runs[b->n_runs] = run_path(b, b->run_seq++);
    ++b->n_runs;
    ++b->runs_spilled;
    return spill_run(&b->inv, b->runs[b->n_runs - 1], err, n);
}

static int pass1(build_t *b, char *err, size_t n)
{
    const sg_bm25_build_opts_t *o = b->o;
    reader_t r;
    memset(&r, 0, sizeof(r));
    int fd = strcmp(o->corpus, "-") == 0 ? dup(0) : open(o->corpus, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errf(err, n, "%s: cannot open: %s", o->corpus, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
        b->prog.total = (uint64_t)st.st_size;
    r.gz = gzdopen(fd, "rb");
    if (r.gz == NULL) {
        close(fd);
        return errf(err, n, "%s: cannot read", o->corpus);
    }
    gzbuffer(r.gz, 1 << 20);
    sg_bm25_analyzer_t *an = sg_bm25_analyzer_new(o->stemmer, o->stopset);
    if (an == NULL)
        abort();
    sg_bm25_tokens_t toks = {0};
    int ret = -1, rerr = 0;
    uint64_t line_no = 0;
    size_t len;
    char *line;
    char idbuf[32];
    while ((line = read_line(&r, &len, &rerr)) != NULL) {
        ++line_no;
        if (is_blank(line, len))
            continue;
        uint64_t doc = b->meta.n_docs;
        if (doc >= UINT32_MAX - 1) {
            errf(err, n, "%s:%llu: too many documents (at most %u)", o->corpus, (unsigned long long)line_no, UINT32_MAX - 2);
            goto out;
        }
        cJSON *row = cJSON_ParseWithLength(line, len);
        if (!cJSON_IsObject(row)) {
            cJSON_Delete(row);
            errf(err, n, "%s:%llu: not a JSON object", o->corpus, (unsigned long long)line_no);
            goto out;
        }
        const cJSON *jc = cJSON_GetObjectItemCaseSensitive(row, "contents");
        const cJSON *ji = cJSON_GetObjectItemCaseSensitive(row, "id");
        const cJSON *ju = cJSON_GetObjectItemCaseSensitive(row, "url");
        const char *id = NULL;
        if (!cJSON_IsString(jc)) {
            cJSON_Delete(row);
            errf(err, n, "%s:%llu: expected a string \"contents\"", o->corpus, (unsigned long long)line_no);
            goto out;
        }
        if (ji == NULL || cJSON_IsNull(ji)) {
            snprintf(idbuf, sizeof(idbuf), "%llu", (unsigned long long)doc);
            id = idbuf;
        } else if (cJSON_IsString(ji)) {
            id = ji->valuestring;
        } else if (cJSON_IsNumber(ji) && ji->valuedouble == (double)(long long)ji->valuedouble &&
                   ji->valuedouble < 9007199254740992.0 && ji->valuedouble > -9007199254740992.0) {
            snprintf(idbuf, sizeof(idbuf), "%lld", (long long)ji->valuedouble);
            id = idbuf;
        } else {
            cJSON_Delete(row);
            errf(err, n, "%s:%llu: \"id\" must be a string or an integer", o->corpus, (unsigned long long)line_no);
            goto out;
        }
        if (ju != NULL && !cJSON_IsNull(ju) && !cJSON_IsString(ju)) {
            cJSON_Delete(row);
            errf(err, n, "%s:%llu: \"url\" must be a string", o->corpus, (unsigned long long)line_no);
            goto out;
        }
        const char *contents = jc->valuestring;
        size_t clen = strlen(contents);
        /* title = first line with surrounding quotes stripped, text = the rest (pyserini's BM25 DOC) */
        const char *nl = memchr(contents, '\n', clen);
        size_t l1 = nl != NULL ? (size_t)(nl - contents) : clen;
        size_t ts = 0, te = l1;
        while (ts < te && contents[ts] == '"')
            ++ts;
        while (te > ts && contents[te - 1] == '"')
            --te;
        b->doc_len = 0;
        puts_(&b->doc, &b->doc_len, &b->doc_cap, "{\"id\":\"");
        sg_bm25_json_escape(&b->doc, &b->doc_len, &b->doc_cap, id, strlen(id));
        puts_(&b->doc, &b->doc_len, &b->doc_cap, "\",\"title\":\"");
        sg_bm25_json_escape(&b->doc, &b->doc_len, &b->doc_cap, contents + ts, te - ts);
        puts_(&b->doc, &b->doc_len, &b->doc_cap, "\",\"text\":\"");
        if (nl != NULL)
            sg_bm25_json_escape(&b->doc, &b->doc_len, &b->doc_cap, nl + 1, clen - l1 - 1);
        puts_(&b->doc, &b->doc_len, &b->doc_cap, "\",\"contents\":\"");
        sg_bm25_json_escape(&b->doc, &b->doc_len, &b->doc_cap, contents, clen);
        puts_(&b->doc, &b->doc_len, &b->doc_cap, "\",\"url\":\"");
        if (cJSON_IsString(ju))
            sg_bm25_json_escape(&b->doc, &b->doc_len, &b->doc_cap, ju->valuestring, strlen(ju->valuestring));
        puts_(&b->doc, &b->doc_len, &b->doc_cap, "\"}");
        /* invert */
        size_t nt = sg_bm25_analyze(an, contents, clen, &toks);
        cJSON_Delete(row);
        if (nt >= UINT32_MAX) {
            errf(err, n, "%s:%llu: document too long", o->corpus, (unsigned long long)line_no);
            goto out;
        }
        inv_t *v = &b->inv;
        v->n_doc_terms = 0;
        for (size_t i = 0; i < nt; ++i) {
            const char *t = sg_bm25_token(&toks, i);
            mterm_t *m = inv_term(v, t, strlen(t));
            if (m->tf++ == 0) {
                if (v->n_doc_terms == v->doc_terms_cap) {
                    v->doc_terms_cap = v->doc_terms_cap != 0 ? v->doc_terms_cap * 2 : 1024;
                    v->doc_terms = xrealloc(v->doc_terms, v->doc_terms_cap * sizeof(*v->doc_terms));
                }
                v->doc_terms[v->n_doc_terms++] = (uint32_t)(m - v->terms);
            }
        }
        for (size_t i = 0; i < v->n_doc_terms; ++i)
            inv_add_posting(v, &v->terms[v->doc_terms[i]], (uint32_t)doc);
        sg_bm25_docent_t de = {b->out[SG_BM25_FILE_DOCS - 1].len, (uint32_t)b->doc_len, (uint32_t)nt};
        if (of_write(&b->out[SG_BM25_FILE_DOCS - 1], b->doc, b->doc_len, err, n) != 0 ||
            of_write(&b->out[SG_BM25_FILE_DOCIDX - 1], &de, sizeof(de), err, n) != 0)
            goto out;
        ++b->meta.n_docs;
        b->meta.n_scored_docs += nt > 0;
        b->meta.total_tokens += nt;
        b->meta.n_postings += v->n_doc_terms;
        if (nt > b->meta.max_doc_tokens)
            b->meta.max_doc_tokens = (uint32_t)nt;
        if (inv_memory(v) >= o->memory_budget && flush_run(b, err, n) != 0)
            goto out;
        if ((b->meta.n_docs & 255) == 0)
            progress_draw(&b->prog, "reading", b->prog.total > 0 ? (uint64_t)gzoffset(r.gz) : r.bytes, b->prog.total,
                          b->meta.n_docs, 0);
    }
    if (rerr) {
        int zerr;
        const char *msg = gzerror(r.gz, &zerr);
        errf(err, n, "%s: read failed after line %llu: %s", o->corpus, (unsigned long long)line_no,
             zerr == Z_ERRNO ? strerror(errno) : msg);
        goto out;
    }
    progress_draw(&b->prog, "reading", b->prog.total, b->prog.total, b->meta.n_docs, 1);
    b->meta.corpus_bytes = r.bytes;
    if (b->inv.n > 0 || b->n_runs == 0) {
        if (flush_run(b, err, n) != 0)
            goto out;
    }
    ret = 0;
out:
    sg_bm25_tokens_free(&toks);
    sg_bm25_analyzer_free(an);
    gzclose(r.gz);
    free(r.buf);
    return ret;
}

/* ---- pass 2: merge ---- */

/* At most this many runs are merged at once (open files, reader buffers); more are first merged
 * in groups of consecutive runs into bigger runs, which keeps them in document order. */
#define SG_BM25_MAX_FANIN 64

/* Where merged terms go: the final dictionary and postings, or one bigger run file. */
typedef struct st_sink_t {
    outfile_t *terms, *post; /* final */
    FILE *strs;              /* final: the term bytes, appended to terms.bin at the end */
    uint64_t n_terms, post_off, str_off;
    FILE *run; /* intermediate */
    const char *run_path;
} sink_t;

/* Merges runs [0, nr) of `paths` (consecutive document ranges, in order) into `sk`; the input
 * run files are deleted. */
static int merge(build_t *b, char **paths, size_t nr, sink_t *sk, char *err, size_t n)
{
    run_t *runs = calloc(nr, sizeof(*runs));
    run_t **heap = calloc(nr, sizeof(*heap));
    int ret = -1;
    if (runs == NULL || heap == NULL)
        abort();
    /* reader buffers share a quarter of the budget */
    size_t bufsz = b->o->memory_budget / 4 / nr;
    if (bufsz > (1u << 20))
        bufsz = 1u << 20;
    if (bufsz < (16u << 10))
        bufsz = 16u << 10;
    uint64_t total = 0;
    size_t nh = 0;
    for (size_t i = 0; i < nr; ++i) {
        run_t *r = &runs[i];
        r->path = paths[i];
        r->idx = (int)i;
        r->fp = fopen(r->path, "rb");
        if (r->fp == NULL) {
            errf(err, n, "%s: cannot open: %s", r->path, strerror(errno));
            goto out;
        }
        setvbuf(r->fp, NULL, _IOFBF, bufsz);
        struct stat st;
        if (fstat(fileno(r->fp), &st) == 0)
            total += (uint64_t)st.st_size;
        if (run_next(r, err, n) != 0)
            goto out;
        if (!r->eof)
            heap[nh++] = r;
    }
    for (size_t i = nh; i-- > 0;)
        heap_down(heap, nh, i);
    uint64_t merged = 0;
    while (nh > 0) {
        /* a new term: gather its segments from every run holding it, in run order */
        run_t *r = heap[0];
        uint32_t tlen = r->h.term_len;
        char term[SG_BM25_MAX_TOKEN_CHARS * 4 + 8];
        if (tlen > sizeof(term)) {
            errf(err, n, "%s: corrupt run file (term of %u bytes)", r->path, tlen);
            goto out;
        }
        memcpy(term, r->term, tlen);
        uint64_t df = 0, nbytes = 0;
        int64_t prev_last = -1;
        uint32_t first_doc = r->h.first_doc;
        off_t hdr_pos = 0;
        if (sk->run != NULL) {
            /* placeholder header, filled in once the segments are known */
            run_hdr_t h0 = {0, 0, 0, 0, 0};
            hdr_pos = ftello(sk->run);
            if (fwrite(&h0, sizeof(h0), 1, sk->run) != 1 || fwrite(term, 1, tlen, sk->run) != tlen)
                goto werr;
        }
        while (nh > 0 && heap[0]->h.term_len == tlen && memcmp(heap[0]->term, term, tlen) == 0) {
            r = heap[0];
            const uint8_t *p = r->post, *end = r->post + r->h.nbytes;
            uint8_t vb[10];
            unsigned k = 0;
            if (prev_last >= 0) {
                /* re-base the first delta (absolute in the run) on the previous segment's last doc */
                uint64_t v;
                if (sg_bm25_get_varint(&p, end, &v) != 0 || (v >> 1) != r->h.first_doc || (int64_t)r->h.first_doc <= prev_last) {
                    errf(err, n, "%s: corrupt run file", r->path);
                    goto out;
                }
                k = sg_bm25_put_varint(vb, ((uint64_t)(r->h.first_doc - prev_last)) << 1 | (v & 1));
            }
            size_t rest = (size_t)(end - p);
            if (sk->run != NULL) {
                if (fwrite(vb, 1, k, sk->run) != k || fwrite(p, 1, rest, sk->run) != rest)
                    goto werr;
            } else if (of_write(sk->post, vb, k, err, n) != 0 || of_write(sk->post, p, rest, err, n) != 0) {
                goto out;
            }
            nbytes += k + rest;
            df += r->h.df;
            prev_last = r->h.last_doc;
            if (run_next(r, err, n) != 0)
                goto out;
            if (r->eof)
                heap[0] = heap[--nh];
            heap_down(heap, nh, 0);
        }
        if (df > UINT32_MAX || nbytes > UINT32_MAX) {
            errf(err, n, "term with more than 2^32 postings");
            goto out;
        }
        if (sk->run != NULL) {
            run_hdr_t h = {tlen, (uint32_t)df, first_doc, (uint32_t)prev_last, (uint32_t)nbytes};
            off_t end_pos = ftello(sk->run);
            if (fseeko(sk->run, hdr_pos, SEEK_SET) != 0 || fwrite(&h, sizeof(h), 1, sk->run) != 1 ||
                fseeko(sk->run, end_pos, SEEK_SET) != 0)
                goto werr;
        } else {
            sg_bm25_terment_t e = {sk->post_off, sk->str_off, (uint32_t)df, 0};
            if (of_write(sk->terms, &e, sizeof(e), err, n) != 0)
                goto out;
            if (fwrite(term, 1, tlen, sk->strs) != tlen) {
                errf(err, n, "term file: write failed: %s", strerror(errno));
                goto out;
            }
            sk->post_off += nbytes;
            sk->str_off += tlen;
            ++sk->n_terms;
        }
        if ((++merged & 1023) == 0) {
            uint64_t done = 0;
            for (size_t i = 0; i < nr; ++i)
                done += runs[i].done;
            progress_draw(&b->prog, "merging", done, total, b->meta.n_docs, 0);
        }
    }
    ret = 0;
    goto out;
werr:
    errf(err, n, "%s: write failed: %s", sk->run_path, strerror(errno));
out:
    for (size_t i = 0; i < nr; ++i) {
        if (runs[i].fp != NULL)
            fclose(runs[i].fp);
        free(runs[i].term);
        free(runs[i].post);
        if (ret == 0)
            unlink(paths[i]);
    }
    free(runs);
    free(heap);
    return ret;
}

static int pass2(build_t *b, char *err, size_t n)
{
    /* fewer than SG_BM25_MAX_FANIN runs: merge groups of consecutive runs first */
    while (b->n_runs > SG_BM25_MAX_FANIN) {
        size_t groups = (b->n_runs + SG_BM25_MAX_FANIN - 1) / SG_BM25_MAX_FANIN;
        char **next = calloc(groups, sizeof(*next));
        if (next == NULL)
            abort();
        for (size_t g = 0; g < groups; ++g) {
            size_t lo = g * SG_BM25_MAX_FANIN, cnt = b->n_runs - lo < SG_BM25_MAX_FANIN ? b->n_runs - lo : SG_BM25_MAX_FANIN;
            next[g] = run_path(b, b->run_seq++);
            sink_t sk = {0};
            sk.run_path = next[g];
            sk.run = fopen(next[g], "wb");
            int r = -1;
            if (sk.run == NULL) {
                errf(err, n, "%s: cannot create: %s", next[g], strerror(errno));
            } else {
                setvbuf(sk.run, NULL, _IOFBF, 1 << 20);
                r = merge(b, b->runs + lo, cnt, &sk, err, n);
                if (fclose(sk.run) != 0 && r == 0)
                    r = errf(err, n, "%s: write failed: %s", next[g], strerror(errno));
            }
            if (r != 0) {
                /* leave the lists consistent for the caller's clean-up */
                for (size_t i = 0; i < b->n_runs; ++i)
                    unlink(b->runs[i]);
                for (size_t i = 0; i <= g; ++i) {
                    unlink(next[i]);
                    free(next[i]);
                }
                free(next);
                return -1;
            }
            for (size_t i = lo; i < lo + cnt; ++i) {
                free(b->runs[i]);
                b->runs[i] = NULL;
            }
        }
        for (size_t i = 0; i < b->n_runs; ++i)
            free(b->runs[i]);
        free(b->runs);
        b->runs = next;
        b->n_runs = groups;
    }
    sink_t sk = {0};
    sk.terms = &b->out[SG_BM25_FILE_TERMS - 1];
    sk.post = &b->out[SG_BM25_FILE_POSTINGS - 1];
    /* the term bytes go to a side file and are appended after the entries */
    char *strs_path = run_path(b, SIZE_MAX);
    sk.strs = fopen(strs_path, "w+b");
    sk.run_path = strs_path;
    uint8_t *tmp = NULL;
    int ret = -1;
    if (sk.strs == NULL) {
        errf(err, n, "%s: cannot create: %s", strs_path, strerror(errno));
        goto out;
    }
    b->prog.start = now_s();
    if (merge(b, b->runs, b->n_runs, &sk, err, n) != 0)
        goto out;
    progress_draw(&b->prog, "merging", 1, 1, b->meta.n_docs, 1);
    sg_bm25_terment_t sentinel = {sk.post_off, sk.str_off, 0, 0};
    if (of_write(sk.terms, &sentinel, sizeof(sentinel), err, n) != 0)
        goto out;
    /* append the term bytes */
    if (fflush(sk.strs) != 0 || fseeko(sk.strs, 0, SEEK_SET) != 0) {
        errf(err, n, "%s: write failed: %s", strs_path, strerror(errno));
        goto out;
    }
    tmp = xmalloc(1 << 20);
    size_t got;
    while ((got = fread(tmp, 1, 1 << 20, sk.strs)) > 0)
        if (of_write(sk.terms, tmp, got, err, n) != 0)
            goto out;
    if (ferror(sk.strs)) {
        errf(err, n, "%s: read failed", strs_path);
        goto out;
    }
    b->meta.n_terms = sk.n_terms;
    ret = 0;
out:
    free(tmp);
    if (sk.strs != NULL)
        fclose(sk.strs);
    unlink(strs_path);
    free(strs_path);
    return ret;
}

static int mkdirs(const char *dir, char *err, size_t n)
{
    char *p = strdup(dir);
    if (p == NULL)
        abort();
    for (char *s = p + 1;; ++s) {
        if (*s == '/' || *s == '\0') {
            char c = *s;
            *s = '\0';
            if (mkdir(p, 0777) != 0 && errno != EEXIST) {
                errf(err, n, "%s: cannot create directory: %s", p, strerror(errno));
                free(p);
                return -1;
            }
            *s = c;
            if (c == '\0')
                break;
        }
    }
    free(p);
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return errf(err, n, "%s: not a directory", dir);
    return 0;
}

int sg_bm25_build(const sg_bm25_build_opts_t *o, sg_bm25_build_stats_t *st, char *err, size_t n)
{
    build_t b;
    memset(&b, 0, sizeof(b));
    memset(st, 0, sizeof(*st));
    b.o = o;
    b.prog.on = o->progress;
    b.prog.start = now_s();
    double t0 = b.prog.start;
    int ret = -1;
    if (!(o->k1 >= 0 && o->k1 <= 1000) || !(o->b >= 0 && o->b <= 1))
        return errf(err, n, "k1 must be in [0, 1000] and b in [0, 1]");
    if (mkdirs(o->out_dir, err, n) != 0 || (o->tmp_dir != NULL && mkdirs(o->tmp_dir, err, n) != 0))
        return -1;
    for (int k = 1; k <= SG_BM25_NUM_FILES; ++k)
        if (of_open(&b.out[k - 1], o->out_dir, k, err, n) != 0)
            goto out;
    b.meta.k1 = o->k1;
    b.meta.b = o->b;
    b.meta.analyzer_version = SG_BM25_ANALYZER_VERSION;
    b.meta.stemmer = o->stemmer;
    b.meta.stopset = o->stopset;
    if (pass1(&b, err, n) != 0)
        goto out;
    inv_free(&b.inv);
    if (pass2(&b, err, n) != 0)
        goto out;
    if (of_write(&b.out[SG_BM25_FILE_META - 1], &b.meta, sizeof(b.meta), err, n) != 0)
        goto out;
    uint64_t lens[SG_BM25_NUM_FILES];
    uint32_t crcs[SG_BM25_NUM_FILES];
    for (int k = 0; k < SG_BM25_NUM_FILES; ++k) {
        lens[k] = b.out[k].len;
        crcs[k] = b.out[k].crc;
    }
    uint64_t id = sg_bm25_build_id(&b.meta, lens, crcs);
    for (int k = 0; k < SG_BM25_NUM_FILES; ++k)
        if (of_finish(&b.out[k], id, err, n) != 0)
            goto out;
    /* bm25.meta last: a reader never sees a new meta with old data files */
    for (int k = SG_BM25_NUM_FILES; k-- > 0;) {
        if (rename(b.out[k].tmp, b.out[k].final) != 0) {
            errf(err, n, "%s: cannot rename into place: %s", b.out[k].final, strerror(errno));
            goto out;
        }
        free(b.out[k].tmp);
        b.out[k].tmp = NULL;
        st->index_bytes += b.out[k].len + SG_BM25_HEADER_SIZE;
    }
    st->docs = b.meta.n_docs;
    st->terms = b.meta.n_terms;
    st->postings = b.meta.n_postings;
    st->tokens = b.meta.total_tokens;
    st->corpus_bytes = b.meta.corpus_bytes;
    st->runs = b.runs_spilled;
    st->build_id = id;
    ret = 0;
out:
    for (int k = 0; k < SG_BM25_NUM_FILES; ++k)
        of_discard(&b.out[k]);
    for (size_t i = 0; i < b.n_runs; ++i) {
        if (b.runs[i] != NULL)
            unlink(b.runs[i]);
        free(b.runs[i]);
    }
    free(b.runs);
    inv_free(&b.inv);
    free(b.doc);
    st->seconds = now_s() - t0;
    return ret;
}
