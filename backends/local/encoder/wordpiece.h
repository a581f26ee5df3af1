/*
 * wordpiece.h -- uncased BERT WordPiece tokenisation, exactly as Hugging Face's BertTokenizer
 * (transformers 4.36, do_lower_case=True, strip_accents=None, tokenize_chinese_chars=True):
 * special tokens written literally in the text ("[SEP]") are kept whole, text cleaning, CJK
 * character splitting, NFC, whitespace split, lower-casing (Python str.lower), NFD accent
 * stripping, punctuation splitting, greedy longest-match "##" pieces with the 100-character word
 * limit, then [CLS] ... [SEP] and truncation.
 *
 * Thread-safety: a loaded vocabulary is read-only; sg_wp_encode may run on any number of threads.
 */
#ifndef SG_LOCAL_WORDPIECE_H
#define SG_LOCAL_WORDPIECE_H

#include <stddef.h>
#include <stdint.h>

typedef struct st_sg_wp_t sg_wp_t;

/** Reads vocab.txt (one token per line; id = line number). Returns 0, or -1 with `err` set. */
int sg_wp_load(const char *path, sg_wp_t **out, char *err, size_t err_size);
void sg_wp_free(sg_wp_t *wp);
/** Number of ids (lines) in the vocabulary. */
size_t sg_wp_size(const sg_wp_t *wp);
/** The id of token `s` (n bytes), or -1. */
int32_t sg_wp_lookup(const sg_wp_t *wp, const char *s, size_t n);
/** FNV-1a of the vocabulary file, for identities. */
uint64_t sg_wp_hash(const sg_wp_t *wp);
/**
 * Ids of `prefix` + `text` (`len` bytes, any bytes; invalid UTF-8 counts as U+FFFD), with [CLS]
 * and [SEP], truncated to `max_len` ids in all (max_len >= 2). Writes at most `max_len` ids into
 * `ids` and returns the count, or -1 when out of memory or max_len < 2.
 */
int sg_wp_encode(const sg_wp_t *wp, const char *prefix, const char *text, size_t len, uint32_t max_len, int32_t *ids);

#endif
