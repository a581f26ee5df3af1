/*
 * builder.h -- builds a bm25 index (format.h) from a wiki-18 style JSONL corpus, streaming, in
 * bounded memory: postings are gathered in memory up to a budget, spilled to sorted run files,
 * and merged into the final dictionary and postings at the end.
 */
#ifndef SG_BM25_BUILDER_H
#define SG_BM25_BUILDER_H

#include "analyzer.h"

#include <stddef.h>
#include <stdint.h>

typedef struct st_sg_bm25_build_opts_t {
    const char *corpus;  /* JSONL path, optionally gzip-compressed; "-" = standard input */
    const char *out_dir; /* created when missing; the five index files are replaced atomically per file */
    const char *tmp_dir; /* for run files; NULL = out_dir */
    double k1, b;        /* BM25 defaults recorded in the index */
    sg_bm25_stemmer_t stemmer;
    sg_bm25_stopset_t stopset;
    size_t memory_budget; /* bytes of in-memory postings and dictionary before a run is spilled */
    int progress;         /* draw a progress bar on stderr */
} sg_bm25_build_opts_t;

typedef struct st_sg_bm25_build_stats_t {
    uint64_t docs, terms, postings, tokens;
    uint64_t corpus_bytes; /* uncompressed bytes read */
    uint64_t index_bytes;  /* size of the five files */
    uint64_t runs;         /* run files spilled (1 when everything fit in the budget) */
    uint64_t build_id;
    double seconds;
} sg_bm25_build_stats_t;

/**
 * Builds the index. Each corpus line is a JSON object with a string "contents" ("\"Title\"\nText")
 * and optionally "id" (string or integer; default: the 0-based row number) and "url" (string);
 * blank lines are skipped. Returns 0, or -1 with a message (naming the file and line) in `err`.
 */
int sg_bm25_build(const sg_bm25_build_opts_t *o, sg_bm25_build_stats_t *st, char *err, size_t err_size);

/**
 * Appends `s` as the contents of a JSON string (no quotes) to the growable buffer (*buf, *len,
 * *cap): escapes '"', '\\' and control characters, keeps other UTF-8 raw and replaces invalid
 * UTF-8 with U+FFFD, so the output is always valid JSON.
 */
void sg_bm25_json_escape(char **buf, size_t *len, size_t *cap, const char *s, size_t n);

#endif
