/*
 * fuzz_wordpiece.c -- libFuzzer harness for the WordPiece tokenizer of the e5 encoder
 * (backends/encoder/wordpiece.c) over the e5-tiny fixture's vocabulary (the real
 * 30,522-token BERT one), loaded once. Byte 0 picks max_len (2 .. 65) and whether the
 * "query: " prefix is used; the rest is the text (any bytes; at most MAX_TEXT of them are used:
 * longer texts only repeat what shorter ones reach, at the cost of speed -- WordPiece's greedy
 * longest match is quadratic in the length of a word). Checks: never crashes or leaks; [CLS]
 * first, [SEP] last, at most max_len ids, every id inside the vocabulary; truncation only cuts:
 * the ids between [CLS] and [SEP] are a prefix of those of the same text with max_len 512, and
 * all of them when fewer than max_len came out; a prefix is the same as the text with the prefix
 * written in front.
 */
#include "fuzz_util.h"
#include "wordpiece.h"

#ifndef SG_FIXTURES
#error "SG_FIXTURES must be defined (path of tests/fixtures)"
#endif

#define FULL 512
#define MAX_TEXT 384

static sg_wp_t *wp;
static int32_t cls, sep;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    char err[256];
    if (sg_wp_load(SG_FIXTURES "/e5-tiny/vocab.txt", &wp, err, sizeof(err)) != 0) {
        fprintf(stderr, "fuzz_wordpiece: %s\n", err);
        abort();
    }
    cls = sg_wp_lookup(wp, "[CLS]", 5);
    sep = sg_wp_lookup(wp, "[SEP]", 5);
    return 0;
}

static void check_ids(const int32_t *ids, int n, uint32_t max_len)
{
    FUZZ_CHECK(n >= 2 && (uint32_t)n <= max_len);
    FUZZ_CHECK(ids[0] == cls && ids[n - 1] == sep);
    for (int i = 0; i < n; ++i)
        FUZZ_CHECK(ids[i] >= 0 && (size_t)ids[i] < sg_wp_size(wp));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const uint32_t max_len = 2 + (data[0] & 63);
    const char *prefix = (data[0] & 64) ? "query: " : NULL;
    const size_t len = size - 1 < MAX_TEXT ? size - 1 : MAX_TEXT;
    char *text = fuzz_copy(data + 1, len);
    int32_t small[66], full[FULL], again[FULL];
    int ns = sg_wp_encode(wp, prefix, text, len, max_len, small);
    check_ids(small, ns, max_len);
    int nf = sg_wp_encode(wp, prefix, text, len, FULL, full);
    check_ids(full, nf, FULL);
    /* truncation keeps the first pieces */
    FUZZ_CHECK(ns <= nf);
    FUZZ_CHECK(memcmp(small + 1, full + 1, (size_t)(ns - 2) * sizeof(int32_t)) == 0);
    if ((uint32_t)ns < max_len)
        FUZZ_CHECK(ns == nf); /* not truncated: the whole text */
    /* the prefix is only text in front */
    if (prefix != NULL) {
        size_t pl = strlen(prefix);
        char *joined = malloc(pl + len + 1);
        FUZZ_CHECK(joined != NULL);
        memcpy(joined, prefix, pl);
        memcpy(joined + pl, text, len);
        int nj = sg_wp_encode(wp, NULL, joined, pl + len, FULL, again);
        FUZZ_CHECK(nj == nf && memcmp(again, full, (size_t)nf * sizeof(int32_t)) == 0);
        free(joined);
    }
    free(text);
    return 0;
}
