/*
 * index.c -- opening, checking and searching a bm25 index (format.h, index.h).
 *
 * Every file is mmapped read-only; the hits handed to the gateway point straight into the
 * mapping of docs.bin, so a search copies no document. Scoring is term-at-a-time into a dense
 * float accumulator per searcher, then a bounded heap picks the top k: exact BM25 over every
 * posting of every query term, as Lucene would score it (without its lossy length encoding).
 */
#include "index.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

const char *const sg_bm25_file_names[SG_BM25_NUM_FILES] = {"bm25.meta", "docs.bin", "docs.idx", "terms.bin", "postings.bin"};

uint32_t sg_bm25_crc32(uint32_t crc, const void *p, size_t n)
{
    const unsigned char *b = p;
    uLong c = crc;
    while (n > 0) {
        size_t k = n > (1u << 30) ? (1u << 30) : n;
        c = crc32(c, b, (uInt)k);
        b += k;
        n -= k;
    }
    return (uint32_t)c;
}

uint32_t sg_bm25_header_crc(const sg_bm25_header_t *h)
{
    return sg_bm25_crc32(0, h, offsetof(sg_bm25_header_t, header_crc));
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; ++i)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

uint64_t sg_bm25_build_id(const sg_bm25_meta_t *meta, const uint64_t lens[SG_BM25_NUM_FILES],
                          const uint32_t crcs[SG_BM25_NUM_FILES])
{
    uint64_t h = fnv1a(1469598103934665603ull, meta, sizeof(*meta));
    for (uint32_t k = SG_BM25_FILE_DOCS; k <= SG_BM25_NUM_FILES; ++k) {
        h = fnv1a(h, &k, sizeof(k));
        h = fnv1a(h, &lens[k - 1], sizeof(lens[k - 1]));
        h = fnv1a(h, &crcs[k - 1], sizeof(crcs[k - 1]));
    }
    return h != 0 ? h : 1;
}

/* ---- opening ---- */

static int fail(char *err, size_t n, const char *dir, int kind, const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static int fail(char *err, size_t n, const char *dir, int kind, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (kind > 0)
        snprintf(err, n, "%s/%s: %s", dir, sg_bm25_file_names[kind - 1], msg);
    else
        snprintf(err, n, "%s: %s", dir, msg);
    return -1;
}

/* Maps one file and checks its header; the payload CRC only when asked. */
static int open_file(sg_bm25_index_t *ix, int kind, int verify, int populate, sg_bm25_header_t *hdr, char *err, size_t n)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", ix->dir, sg_bm25_file_names[kind - 1]);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fail(err, n, ix->dir, kind, "cannot open: %s%s", strerror(errno),
                    errno == ENOENT ? " (is this a bm25 index directory? build one with searchgate-index-bm25)" : "");
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return fail(err, n, ix->dir, kind, "not a regular file");
    }
    size_t size = (size_t)st.st_size;
    if (size < SG_BM25_HEADER_SIZE) {
        close(fd);
        return fail(err, n, ix->dir, kind, "too short to be a bm25 index file (%zu bytes): truncated or not an index", size);
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_SHARED | (populate ? MAP_POPULATE : 0), fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return fail(err, n, ix->dir, kind, "mmap failed: %s", strerror(errno));
    ix->files[kind - 1].map = map;
    ix->files[kind - 1].size = size;
    ix->total_bytes += size;
    memcpy(hdr, map, sizeof(*hdr));
    if (memcmp(hdr->magic, SG_BM25_MAGIC, 8) != 0)
        return fail(err, n, ix->dir, kind, "not a searchgate bm25 index file (bad magic)");
    if (hdr->version != SG_BM25_FORMAT_VERSION)
        return fail(err, n, ix->dir, kind,
                    "index format version %u, but this searchgate reads version %u: rebuild the index with searchgate-index-bm25",
                    hdr->version, SG_BM25_FORMAT_VERSION);
    if (sg_bm25_header_crc(hdr) != hdr->header_crc)
        return fail(err, n, ix->dir, kind, "header checksum mismatch: the file is corrupt");
    if (hdr->kind != (uint32_t)kind || hdr->header_size != SG_BM25_HEADER_SIZE)
        return fail(err, n, ix->dir, kind, "header describes another kind of file (kind %u, expected %d): the file is misplaced",
                    hdr->kind, kind);
    if (hdr->payload_len != size - SG_BM25_HEADER_SIZE)
        return fail(err, n, ix->dir, kind, "file is %zu bytes but its header says %llu: truncated or corrupt", size,
                    (unsigned long long)(hdr->payload_len + SG_BM25_HEADER_SIZE));
    if (verify == SG_BM25_VERIFY_FULL) {
        uint32_t crc = sg_bm25_crc32(0, (const char *)map + SG_BM25_HEADER_SIZE, size - SG_BM25_HEADER_SIZE);
        if (crc != hdr->payload_crc)
            return fail(err, n, ix->dir, kind, "payload checksum mismatch (crc %08x, header says %08x): the file is corrupt", crc,
                        hdr->payload_crc);
    }
    return 0;
}

static const void *payload(const sg_bm25_index_t *ix, int kind)
{
    return (const char *)ix->files[kind - 1].map + SG_BM25_HEADER_SIZE;
}

static uint64_t payload_len(const sg_bm25_index_t *ix, int kind)
{
    return ix->files[kind - 1].size - SG_BM25_HEADER_SIZE;
}

int sg_bm25_index_open(sg_bm25_index_t *ix, const char *dir, int verify, int populate, char *err, size_t n)
{
    memset(ix, 0, sizeof(*ix));
    ix->dir = strdup(dir);
    if (ix->dir == NULL)
        abort();
    struct stat st;
    if (stat(dir, &st) != 0) {
        fail(err, n, dir, 0, "cannot open the index directory: %s (build one with searchgate-index-bm25)", strerror(errno));
        goto bad;
    }
    if (!S_ISDIR(st.st_mode)) {
        fail(err, n, dir, 0, "not a directory: a bm25 index is a directory made by searchgate-index-bm25");
        goto bad;
    }
    sg_bm25_header_t hdr[SG_BM25_NUM_FILES];
    for (int k = 1; k <= SG_BM25_NUM_FILES; ++k)
        if (open_file(ix, k, verify, populate, &hdr[k - 1], err, n) != 0)
            goto bad;
    /* meta */
    if (payload_len(ix, SG_BM25_FILE_META) != sizeof(sg_bm25_meta_t)) {
        fail(err, n, dir, SG_BM25_FILE_META, "payload is %llu bytes, expected %zu: corrupt",
             (unsigned long long)payload_len(ix, SG_BM25_FILE_META), sizeof(sg_bm25_meta_t));
        goto bad;
    }
    memcpy(&ix->meta, payload(ix, SG_BM25_FILE_META), sizeof(ix->meta));
    const sg_bm25_meta_t *m = &ix->meta;
    if (sg_bm25_crc32(0, m, sizeof(*m)) != hdr[0].payload_crc) {
        fail(err, n, dir, SG_BM25_FILE_META, "payload checksum mismatch: the file is corrupt");
        goto bad;
    }
    if (m->analyzer_version != SG_BM25_ANALYZER_VERSION) {
        fail(err, n, dir, SG_BM25_FILE_META,
             "built with analyzer version %u, but this searchgate analyzes queries with version %u: rebuild the index with "
             "searchgate-index-bm25",
             m->analyzer_version, SG_BM25_ANALYZER_VERSION);
        goto bad;
    }
    if (m->stemmer > SG_BM25_STEM_NONE || m->stopset > SG_BM25_STOP_NONE || !(m->k1 >= 0 && m->k1 <= 1000) ||
        !(m->b >= 0 && m->b <= 1) || m->n_scored_docs > m->n_docs || m->n_docs >= UINT32_MAX) {
        fail(err, n, dir, SG_BM25_FILE_META, "implausible values in the header: corrupt");
        goto bad;
    }
    /* every file belongs to this build */
    uint64_t lens[SG_BM25_NUM_FILES];
    uint32_t crcs[SG_BM25_NUM_FILES];
    for (int k = 1; k <= SG_BM25_NUM_FILES; ++k) {
        lens[k - 1] = hdr[k - 1].payload_len;
        crcs[k - 1] = hdr[k - 1].payload_crc;
    }
    ix->build_id = hdr[0].build_id;
    for (int k = 2; k <= SG_BM25_NUM_FILES; ++k) {
        if (hdr[k - 1].build_id != ix->build_id) {
            fail(err, n, dir, k,
                 "belongs to another build of the index (build id %016llx, bm25.meta has %016llx): files of two builds are "
                 "mixed; rebuild the index",
                 (unsigned long long)hdr[k - 1].build_id, (unsigned long long)ix->build_id);
            goto bad;
        }
    }
    if (sg_bm25_build_id(m, lens, crcs) != ix->build_id) {
        fail(err, n, dir, SG_BM25_FILE_META, "build id does not match the lengths and checksums of the index files: corrupt");
        goto bad;
    }
    /* documents */
    ix->docs = payload(ix, SG_BM25_FILE_DOCS);
    ix->docs_len = payload_len(ix, SG_BM25_FILE_DOCS);
    if (payload_len(ix, SG_BM25_FILE_DOCIDX) != m->n_docs * sizeof(sg_bm25_docent_t)) {
        fail(err, n, dir, SG_BM25_FILE_DOCIDX, "holds %llu bytes of entries for %llu documents: corrupt",
             (unsigned long long)payload_len(ix, SG_BM25_FILE_DOCIDX), (unsigned long long)m->n_docs);
        goto bad;
    }
    ix->docent = payload(ix, SG_BM25_FILE_DOCIDX);
    uint64_t tokens = 0, scored = 0;
    for (uint64_t d = 0; d < m->n_docs; ++d) {
        const sg_bm25_docent_t *e = &ix->docent[d];
        if (e->off > ix->docs_len || e->len > ix->docs_len - e->off || e->len < 2 || e->ntokens > m->max_doc_tokens) {
            fail(err, n, dir, SG_BM25_FILE_DOCIDX, "entry of document %llu is out of bounds: corrupt", (unsigned long long)d);
            goto bad;
        }
        tokens += e->ntokens;
        scored += e->ntokens > 0;
    }
    if (tokens != m->total_tokens || scored != m->n_scored_docs) {
        fail(err, n, dir, SG_BM25_FILE_DOCIDX, "document lengths do not add up to the totals in bm25.meta: corrupt");
        goto bad;
    }
    /* dictionary */
    uint64_t tlen = payload_len(ix, SG_BM25_FILE_TERMS);
    if (m->n_terms >= UINT32_MAX || tlen < (m->n_terms + 1) * sizeof(sg_bm25_terment_t)) {
        fail(err, n, dir, SG_BM25_FILE_TERMS, "too short for %llu terms: corrupt", (unsigned long long)m->n_terms);
        goto bad;
    }
    ix->terms = payload(ix, SG_BM25_FILE_TERMS);
    ix->term_bytes = (const char *)ix->terms + (m->n_terms + 1) * sizeof(sg_bm25_terment_t);
    uint64_t blen = tlen - (m->n_terms + 1) * sizeof(sg_bm25_terment_t);
    ix->postings = payload(ix, SG_BM25_FILE_POSTINGS);
    ix->postings_len = payload_len(ix, SG_BM25_FILE_POSTINGS);
    uint64_t dfs = 0;
    for (uint64_t t = 0; t < m->n_terms; ++t) {
        const sg_bm25_terment_t *a = &ix->terms[t], *b = a + 1;
        if (b->str_off <= a->str_off || b->post_off <= a->post_off || a->df == 0 || a->df > m->n_scored_docs) {
            fail(err, n, dir, SG_BM25_FILE_TERMS, "dictionary entry %llu is inconsistent: corrupt", (unsigned long long)t);
            goto bad;
        }
        dfs += a->df;
    }
    const sg_bm25_terment_t *sent = &ix->terms[m->n_terms];
    if (ix->terms[0].str_off != 0 || ix->terms[0].post_off != 0 || sent->str_off != blen || sent->post_off != ix->postings_len ||
        dfs != m->n_postings) {
        fail(err, n, dir, SG_BM25_FILE_TERMS, "dictionary does not cover the term bytes and postings exactly: corrupt");
        goto bad;
    }
    if (verify == SG_BM25_VERIFY_FULL) {
        for (uint64_t t = 1; t < m->n_terms; ++t) {
            const sg_bm25_terment_t *a = &ix->terms[t - 1], *b = &ix->terms[t];
            size_t la = b->str_off - a->str_off, lb = b[1].str_off - b->str_off;
            int c = memcmp(ix->term_bytes + a->str_off, ix->term_bytes + b->str_off, la < lb ? la : lb);
            if (c > 0 || (c == 0 && la >= lb)) {
                fail(err, n, dir, SG_BM25_FILE_TERMS, "terms are not in order at entry %llu: corrupt", (unsigned long long)t);
                goto bad;
            }
        }
    }
    ix->avgdl = m->n_scored_docs > 0 ? (double)m->total_tokens / (double)m->n_scored_docs : 1.0;
    return 0;
bad:
    sg_bm25_index_close(ix);
    return -1;
}

void sg_bm25_index_close(sg_bm25_index_t *ix)
{
    for (int k = 0; k < SG_BM25_NUM_FILES; ++k)
        if (ix->files[k].map != NULL)
            munmap(ix->files[k].map, ix->files[k].size);
    free(ix->dir);
    memset(ix, 0, sizeof(*ix));
}

int64_t sg_bm25_index_find(const sg_bm25_index_t *ix, const char *term, size_t len)
{
    uint64_t lo = 0, hi = ix->meta.n_terms;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        const sg_bm25_terment_t *e = &ix->terms[mid];
        size_t el = e[1].str_off - e->str_off;
        int c = memcmp(ix->term_bytes + e->str_off, term, el < len ? el : len);
        if (c == 0)
            c = el < len ? -1 : el > len ? 1 : 0;
        if (c == 0)
            return (int64_t)mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

double sg_bm25_idf(const sg_bm25_index_t *ix, uint64_t df)
{
    double N = (double)ix->meta.n_scored_docs;
    return log(1.0 + (N - (double)df + 0.5) / ((double)df + 0.5));
}

float *sg_bm25_norms(const sg_bm25_index_t *ix, double k1, double b)
{
    float *norms = malloc((ix->meta.n_docs != 0 ? ix->meta.n_docs : 1) * sizeof(*norms));
    if (norms == NULL)
        return NULL;
    for (uint64_t d = 0; d < ix->meta.n_docs; ++d)
        norms[d] = (float)(k1 * (1.0 - b + b * (double)ix->docent[d].ntokens / ix->avgdl));
    return norms;
}

/* ---- searching ---- */

typedef struct st_qterm_t {
    const char *s;
    size_t len;
    uint32_t qtf;
} qterm_t;

struct st_sg_bm25_searcher_t {
    const sg_bm25_index_t *ix;
    const float *norms;
    sg_bm25_analyzer_t *an;
    sg_bm25_tokens_t toks;
    qterm_t *qt;
    size_t qt_cap;
    float *acc;        /* n_docs, all zero between searches */
    uint32_t *touched; /* docs with a non-zero accumulator */
};

sg_bm25_searcher_t *sg_bm25_searcher_new(const sg_bm25_index_t *ix, const float *norms)
{
    sg_bm25_searcher_t *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    size_t n = ix->meta.n_docs != 0 ? ix->meta.n_docs : 1;
    s->ix = ix;
    s->norms = norms;
    s->an = sg_bm25_analyzer_new((sg_bm25_stemmer_t)ix->meta.stemmer, (sg_bm25_stopset_t)ix->meta.stopset);
    s->acc = calloc(n, sizeof(*s->acc));
    s->touched = malloc(n * sizeof(*s->touched));
    if (s->an == NULL || s->acc == NULL || s->touched == NULL) {
        sg_bm25_searcher_free(s);
        return NULL;
    }
    return s;
}

void sg_bm25_searcher_free(sg_bm25_searcher_t *s)
{
    if (s == NULL)
        return;
    sg_bm25_analyzer_free(s->an);
    sg_bm25_tokens_free(&s->toks);
    free(s->qt);
    free(s->acc);
    free(s->touched);
    free(s);
}

static int cmp_qterm(const void *a, const void *b)
{
    const qterm_t *x = a, *y = b;
    int c = memcmp(x->s, y->s, x->len < y->len ? x->len : y->len);
    return c != 0 ? c : (x->len > y->len) - (x->len < y->len);
}

/* Is hit a better than hit b? Higher score first, then lower document number. */
static int better(const sg_bm25_hit_t *a, const sg_bm25_hit_t *b)
{
    return a->score > b->score || (a->score == b->score && a->doc < b->doc);
}

/* Min-heap on "better": the root is the worst of the kept hits. */
static void sift_down(sg_bm25_hit_t *h, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && better(&h[w], &h[l]))
            w = l;
        if (r < n && better(&h[w], &h[r]))
            w = r;
        if (w == i)
            return;
        sg_bm25_hit_t t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

static void sift_up(sg_bm25_hit_t *h, size_t i)
{
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!better(&h[p], &h[i]))
            return;
        sg_bm25_hit_t t = h[i];
        h[i] = h[p];
        h[p] = t;
        i = p;
    }
}

static int cmp_hit(const void *a, const void *b)
{
    return better(a, b) ? -1 : better(b, a) ? 1 : 0;
}

size_t sg_bm25_search(sg_bm25_searcher_t *s, const char *query, size_t len, uint32_t topk, sg_bm25_hit_t *out, sg_bm25_qstats_t *st)
{
    const sg_bm25_index_t *ix = s->ix;
    size_t nt = sg_bm25_analyze(s->an, query, len, &s->toks);
    if (nt == 0 || topk == 0)
        return 0;
    /* distinct terms with their query frequency (pyserini boosts a repeated term by its count) */
    if (nt > s->qt_cap) {
        s->qt_cap = nt;
        free(s->qt);
        s->qt = malloc(nt * sizeof(*s->qt));
        if (s->qt == NULL)
            abort();
    }
    for (size_t i = 0; i < nt; ++i) {
        s->qt[i].s = sg_bm25_token(&s->toks, i);
        s->qt[i].len = strlen(s->qt[i].s);
        s->qt[i].qtf = 1;
    }
    qsort(s->qt, nt, sizeof(*s->qt), cmp_qterm);
    size_t nq = 0;
    for (size_t i = 0; i < nt; ++i) {
        if (nq > 0 && cmp_qterm(&s->qt[nq - 1], &s->qt[i]) == 0)
            ++s->qt[nq - 1].qtf;
        else
            s->qt[nq++] = s->qt[i];
    }
    size_t n_touched = 0;
    const uint64_t n_docs = ix->meta.n_docs;
    for (size_t i = 0; i < nq; ++i) {
        int64_t t = sg_bm25_index_find(ix, s->qt[i].s, s->qt[i].len);
        if (t < 0)
            continue;
        const sg_bm25_terment_t *e = &ix->terms[t];
        double w = (double)s->qt[i].qtf * sg_bm25_idf(ix, e->df);
        const uint8_t *p = ix->postings + e->post_off, *end = ix->postings + e[1].post_off;
        uint64_t doc = 0;
        ++st->terms;
        for (uint32_t k = 0; k < e->df; ++k) {
            uint64_t v, tf = 1;
            if (p < end && *p < 0x80) {
                v = *p++;
            } else if (sg_bm25_get_varint(&p, end, &v) != 0) {
                ++st->corrupt;
                break;
            }
            if ((v & 1) == 0 && (sg_bm25_get_varint(&p, end, &tf) != 0 || tf < 2 || tf > UINT32_MAX)) {
                ++st->corrupt;
                break;
            }
            uint64_t delta = v >> 1;
            if (k > 0 && delta == 0) {
                ++st->corrupt;
                break;
            }
            doc += delta;
            if (doc >= n_docs) {
                ++st->corrupt;
                break;
            }
            float *a = &s->acc[doc];
            if (*a == 0.0f)
                s->touched[n_touched++] = (uint32_t)doc;
            *a += (float)(w * (double)tf / ((double)tf + (double)s->norms[doc]));
        }
        st->postings += e->df;
    }
    /* top k, then clear the accumulator */
    size_t n = 0;
    for (size_t i = 0; i < n_touched; ++i) {
        uint32_t d = s->touched[i];
        sg_bm25_hit_t h = {d, s->acc[d]};
        s->acc[d] = 0.0f;
        if (n < topk) {
            out[n] = h;
            sift_up(out, n++);
        } else if (better(&h, &out[0])) {
            out[0] = h;
            sift_down(out, n, 0);
        }
    }
    qsort(out, n, sizeof(*out), cmp_hit);
    return n;
}
