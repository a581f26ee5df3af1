/*
 * index.h -- a bm25 index opened for searching: the five files of format.h mapped read-only,
 * checked, and the BM25 scorer over them.
 *
 * Threading: an opened sg_bm25_index_t is immutable and may be shared by any number of threads;
 * each thread brings its own sg_bm25_searcher_t.
 */
#ifndef SG_BM25_INDEX_H
#define SG_BM25_INDEX_H

#include "analyzer.h"
#include "format.h"

#include <stddef.h>
#include <stdint.h>

typedef struct st_sg_bm25_index_t {
    char *dir;
    sg_bm25_meta_t meta;
    uint64_t build_id;
    struct {
        void *map;
        size_t size;
    } files[SG_BM25_NUM_FILES];
    const char *docs; /* docs.bin payload */
    uint64_t docs_len;
    const sg_bm25_docent_t *docent; /* n_docs */
    const sg_bm25_terment_t *terms; /* n_terms + 1 */
    const char *term_bytes;         /* the bytes of every term, in order */
    const uint8_t *postings;
    uint64_t postings_len;
    uint64_t total_bytes; /* sum of the file sizes */
    double avgdl;
} sg_bm25_index_t;

enum { SG_BM25_VERIFY_HEADER = 0, SG_BM25_VERIFY_FULL = 1 };

/**
 * Opens the index in `dir`. Headers, sizes, build ids and the structure of the dictionary and
 * document table are always checked; SG_BM25_VERIFY_FULL also checks every payload CRC and the
 * term order (reads everything once). `populate` pre-faults the mappings. On failure returns -1
 * with a message naming the offending file in `err`.
 */
int sg_bm25_index_open(sg_bm25_index_t *ix, const char *dir, int verify, int populate, char *err, size_t err_size);
void sg_bm25_index_close(sg_bm25_index_t *ix);

/** Binary search of the dictionary: the term number, or -1 when the term is not indexed. */
int64_t sg_bm25_index_find(const sg_bm25_index_t *ix, const char *term, size_t len);

/** idf of a term with document frequency df: ln(1 + (N - df + 0.5) / (df + 0.5)), Lucene's. */
double sg_bm25_idf(const sg_bm25_index_t *ix, uint64_t df);

/**
 * Per-document length normalisation k1 * (1 - b + b * dl / avgdl) for every document, as one
 * malloc'ed float array (NULL when out of memory). Shared read-only by the searchers.
 */
float *sg_bm25_norms(const sg_bm25_index_t *ix, double k1, double b);

typedef struct st_sg_bm25_hit_t {
    uint32_t doc;
    float score;
} sg_bm25_hit_t;

typedef struct st_sg_bm25_qstats_t {
    uint64_t terms;    /* distinct query terms found in the dictionary */
    uint64_t postings; /* postings scored */
    uint64_t corrupt;  /* posting lists that failed to decode (only possible when not fully verified) */
} sg_bm25_qstats_t;

typedef struct st_sg_bm25_searcher_t sg_bm25_searcher_t;

/** A searcher for one thread; `norms` from sg_bm25_norms() must outlive it. NULL when out of memory. */
sg_bm25_searcher_t *sg_bm25_searcher_new(const sg_bm25_index_t *ix, const float *norms);
void sg_bm25_searcher_free(sg_bm25_searcher_t *s);
/**
 * Scores one query: analyzes it, sums qtf * idf * tf / (tf + norm[doc]) over its distinct terms
 * and writes the best min(topk, matching documents) hits into `out`, best first; equal scores
 * are ordered by document number (corpus order). Returns the number of hits (0 for a query with
 * no indexed term, e.g. empty or punctuation-only).
 */
size_t sg_bm25_search(sg_bm25_searcher_t *s, const char *query, size_t len, uint32_t topk, sg_bm25_hit_t *out,
                      sg_bm25_qstats_t *st);

/** CRC-32 of a buffer of any size (zlib). */
uint32_t sg_bm25_crc32(uint32_t crc, const void *p, size_t n);

#endif
