/*
 * wordpiece.h -- uncased BERT WordPiece tokenisation, exactly as Hugging Face's BertTokenizer
 * (transformers 4.36, do_lower_case=True, strip_accents=None, tokenize_chinese_chars=True):
 * special tokens written literally in the text ("[SEP]") are kept whole, text cleaning, CJK
 * character splitting, NFC, whitespace split, lower-casing (Python str.lower), NFD accent
 * stripping, punctuation splitting, greedy longest-match "##" pieces with the 100-character word
 * limit, then [CLS] ... [SEP] and truncation; or a pair of texts as `[CLS] A [SEP] B [SEP]`
 * with token types and longest-first truncation (cross-encoders).
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

/**
 * The two implementations of truncation "longest_first" for a pair. They agree except when both
 * segments must be cut and the budget (max_len - 3) is odd: the spare piece goes to the longer
 * segment (the second on a tie) in SG_WP_TRUNC_FAST -- the `tokenizers` library behind
 * BertTokenizerFast, which AutoTokenizer and so sentence-transformers' CrossEncoder load -- and to
 * the first segment in SG_WP_TRUNC_SLOW -- transformers' pure-Python BertTokenizer.
 */
enum { SG_WP_TRUNC_FAST = 0, SG_WP_TRUNC_SLOW = 1 };
/**
 * Ids of the pair (`a`, `b`) as BertTokenizer(a, b, truncation="longest_first",
 * max_length=max_len): `[CLS] A [SEP] B [SEP]`, each segment tokenised alone (as sg_wp_encode,
 * without prefix), the longer segment cut first so that the whole fits in `max_len` ids (rule:
 * SG_WP_TRUNC_*). `types` (may be NULL) gets the token type ids: 0 for `[CLS] A [SEP]`, 1 for
 * `B [SEP]`. Writes at most `max_len` entries to each and returns the count, or -1 when out of
 * memory, max_len < 3 or the rule is unknown.
 */
int sg_wp_encode_pair(const sg_wp_t *wp, const char *a, size_t alen, const char *b, size_t blen, uint32_t max_len, int rule,
                      int32_t *ids, uint8_t *types);

#endif
