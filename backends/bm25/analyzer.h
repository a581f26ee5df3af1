/*
 * analyzer.h -- the text analysis of the bm25 backend: an equivalent of Lucene's EnglishAnalyzer
 * (the analyzer pyserini/Anserini use for English BM25 by default).
 *
 * Chain: NFC normalisation -> Unicode word segmentation (the UAX #29 word-break rules that Lucene's
 * StandardTokenizer implements: letters, digits, "can't", "3.14", "1,000", single CJK ideographs,
 * katakana runs) -> possessive "'s" removal -> lower-casing -> stop words (Lucene's English set)
 * -> stemming (Snowball "porter" = the original Porter algorithm of Lucene's PorterStemFilter,
 * or "english" = Porter2, or none).
 *
 * The same analyzer runs at index time and at query time; the index records which stemmer and
 * stop-word set it was built with, and the searcher analyzes queries the same way.
 *
 * Threading: an analyzer is not thread-safe (the Snowball stemmer keeps state); use one per thread.
 */
#ifndef SG_BM25_ANALYZER_H
#define SG_BM25_ANALYZER_H

#include <stddef.h>
#include <stdint.h>

/** Bumped whenever a change of this file would tokenize some text differently (indexes record it). */
#define SG_BM25_ANALYZER_VERSION 1
/** Longest token in code points; longer runs are split, as Lucene's StandardTokenizer does at 255. */
#define SG_BM25_MAX_TOKEN_CHARS 255

typedef enum sg_bm25_stemmer {
    SG_BM25_STEM_PORTER = 0,  /* Snowball "porter": the original Porter (1980) algorithm, as Lucene's PorterStemFilter */
    SG_BM25_STEM_ENGLISH = 1, /* Snowball "english": Porter2 */
    SG_BM25_STEM_NONE = 2
} sg_bm25_stemmer_t;

typedef enum sg_bm25_stopset {
    SG_BM25_STOP_LUCENE = 0, /* EnglishAnalyzer.ENGLISH_STOP_WORDS_SET, 33 words */
    SG_BM25_STOP_NONE = 1
} sg_bm25_stopset_t;

/** Tokens of one text: `n` NUL-terminated strings in `buf`, token i starting at `buf + off[i]`. */
typedef struct st_sg_bm25_tokens_t {
    char *buf;
    size_t len, cap;
    uint32_t *off;
    size_t n, off_cap;
} sg_bm25_tokens_t;

typedef struct st_sg_bm25_analyzer_t sg_bm25_analyzer_t;

/** Creates an analyzer; NULL when the stemmer cannot be created (out of memory). */
sg_bm25_analyzer_t *sg_bm25_analyzer_new(sg_bm25_stemmer_t stemmer, sg_bm25_stopset_t stopset);
void sg_bm25_analyzer_free(sg_bm25_analyzer_t *a);
/**
 * Analyzes `len` bytes of UTF-8 `text` into `out` (cleared first) and returns the number of tokens.
 * Invalid UTF-8 bytes separate tokens and are otherwise ignored; empty or punctuation-only text
 * gives zero tokens.
 */
size_t sg_bm25_analyze(sg_bm25_analyzer_t *a, const char *text, size_t len, sg_bm25_tokens_t *out);
static inline const char *sg_bm25_token(const sg_bm25_tokens_t *t, size_t i)
{
    return t->buf + t->off[i];
}
void sg_bm25_tokens_free(sg_bm25_tokens_t *t);

/** Is `w` (NUL-terminated, lower-case) in Lucene's English stop-word set? */
int sg_bm25_is_stopword(const char *w, size_t len);

/** "porter", "english", "none" <-> enum; parse returns -1 for an unknown name. */
int sg_bm25_stemmer_parse(const char *name, sg_bm25_stemmer_t *out);
const char *sg_bm25_stemmer_name(sg_bm25_stemmer_t s);
/** "lucene", "none" <-> enum. */
int sg_bm25_stopset_parse(const char *name, sg_bm25_stopset_t *out);
const char *sg_bm25_stopset_name(sg_bm25_stopset_t s);

#endif
