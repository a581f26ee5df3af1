/*
 * wordpiece.c -- BertTokenizer (transformers 4.36, the pure-Python one the fixtures were made
 * with) re-done in C over utf8proc. The steps and their Python originals:
 *
 *   PreTrainedTokenizer.tokenize   literal special tokens ([CLS] [SEP] [PAD] [UNK] [MASK], exact
 *                                  case) are cut out of the text and map to their ids
 *   BasicTokenizer._clean_text     drop U+0000, U+FFFD and category C* except \t \n \r;
 *                                  \t \n \r and category Zs become ' '
 *   _tokenize_chinese_chars        ' ' around every CJK ideograph (the BERT ranges)
 *   unicodedata.normalize("NFC")   utf8proc compose
 *   whitespace_tokenize            str.split(): Python's whitespace set
 *   token.lower()                  full lower-case mapping (U+0130 -> "i\u0307", final sigma)
 *   _run_strip_accents             NFD, drop category Mn
 *   _run_split_on_punc             ASCII punctuation ranges or category P*
 *   WordpieceTokenizer.tokenize    > 100 code points -> [UNK]; greedy longest match, "##" pieces;
 *                                  any piece missing -> the whole word is [UNK]
 *
 * Tokenisation stops as soon as max_len - 2 word pieces are known (truncation only keeps those).
 * A pair (PreTrainedTokenizerBase.__call__(text, text_pair)) tokenises each segment alone, counting
 * one piece past the budget to learn whether it must be cut, then keeps what longest-first
 * truncation keeps (sg_wp_encode_pair).
 */
#include "wordpiece.h"
#include "hmap.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#define MAX_WORD_CHARS 100

struct st_sg_wp_t {
    char *arena;      /* the file, with '\0' in place of each '\n' */
    size_t n_tokens;  /* lines */
    sg_hmap_t vocab;  /* token -> &tok[id] */
    const char **tok; /* id -> token */
    uint32_t *tok_len;
    int32_t cls, sep, unk;
    int32_t special_id[5];
    uint64_t hash;
    size_t max_tok_len; /* bytes of the longest token: no longer piece can match */
};

static const char *const special_names[5] = {"[CLS]", "[SEP]", "[PAD]", "[UNK]", "[MASK]"};

static uint64_t fnv(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; ++i)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

/* whether the token at `item` (&wp->tok[id]) is the key */
static int token_eq(const void *item, const void *key, size_t key_len, const void *ud)
{
    const sg_wp_t *wp = ud;
    const char *const *tok = item;
    return wp->tok_len[tok - wp->tok] == key_len && memcmp(*tok, key, key_len) == 0;
}

int32_t sg_wp_lookup(const sg_wp_t *wp, const char *s, size_t n)
{
    const char *const *tok = sg_hmap_find(&wp->vocab, sg_hmap_hash(s, n), s, n);
    return tok != NULL ? (int32_t)(tok - wp->tok) : -1;
}

size_t sg_wp_size(const sg_wp_t *wp)
{
    return wp->n_tokens;
}

uint64_t sg_wp_hash(const sg_wp_t *wp)
{
    return wp->hash;
}

void sg_wp_free(sg_wp_t *wp)
{
    if (wp == NULL)
        return;
    free(wp->arena);
    sg_hmap_dispose(&wp->vocab);
    free(wp->tok);
    free(wp->tok_len);
    free(wp);
}

int sg_wp_load(const char *path, sg_wp_t **out, char *err, size_t err_size)
{
    *out = NULL;
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) {
        snprintf(err, err_size, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    sg_wp_t *wp = calloc(1, sizeof(*wp));
    size_t cap = 1 << 20, len = 0;
    char *buf = malloc(cap + 1);
    if (wp == NULL || buf == NULL)
        abort();
    size_t got;
    while ((got = fread(buf + len, 1, cap - len, fp)) > 0) {
        len += got;
        if (len == cap) {
            cap *= 2;
            buf = realloc(buf, cap + 1);
            if (buf == NULL)
                abort();
        }
    }
    int rd_err = ferror(fp);
    fclose(fp);
    if (rd_err) {
        snprintf(err, err_size, "%s: read error", path);
        free(buf);
        free(wp);
        return -1;
    }
    buf[len] = '\0';
    wp->arena = buf;
    wp->hash = fnv(buf, len);
    /* Python: readlines(), rstrip("\n") -- a final line without '\n' still counts, an empty file has none */
    size_t n = 0;
    for (size_t i = 0; i < len; ++i)
        if (buf[i] == '\n')
            ++n;
    if (len > 0 && buf[len - 1] != '\n')
        ++n;
    if (n == 0) {
        snprintf(err, err_size, "%s: empty vocabulary", path);
        sg_wp_free(wp);
        return -1;
    }
    wp->n_tokens = n;
    wp->tok = calloc(n, sizeof(*wp->tok));
    wp->tok_len = calloc(n, sizeof(*wp->tok_len));
    sg_hmap_init(&wp->vocab, token_eq, wp, n);
    if (wp->tok == NULL || wp->tok_len == NULL)
        abort();
    size_t start = 0, id = 0;
    for (size_t i = 0; i <= len && id < n; ++i) {
        if (i == len || buf[i] == '\n') {
            if (i == len && start == len)
                break;
            buf[i] = '\0';
            wp->tok[id] = buf + start;
            wp->tok_len[id] = (uint32_t)(i - start);
            if (i - start > wp->max_tok_len)
                wp->max_tok_len = i - start;
            /* a later duplicate wins, as in the Python dict */
            uint64_t h = sg_hmap_hash(buf + start, i - start);
            const char **had = sg_hmap_find_or_insert(&wp->vocab, h, buf + start, i - start, &wp->tok[id]);
            if (had != &wp->tok[id]) {
                sg_hmap_remove(&wp->vocab, h, had);
                sg_hmap_insert(&wp->vocab, h, &wp->tok[id]);
            }
            ++id;
            start = i + 1;
        }
    }
    for (int k = 0; k < 5; ++k)
        wp->special_id[k] = sg_wp_lookup(wp, special_names[k], strlen(special_names[k]));
    wp->cls = wp->special_id[0];
    wp->sep = wp->special_id[1];
    wp->unk = wp->special_id[3];
    if (wp->cls < 0 || wp->sep < 0 || wp->unk < 0) {
        snprintf(err, err_size, "%s: the vocabulary lacks %s", path, wp->cls < 0 ? "[CLS]" : wp->sep < 0 ? "[SEP]" : "[UNK]");
        sg_wp_free(wp);
        return -1;
    }
    *out = wp;
    return 0;
}

/* ---- character classes (Python's unicodedata semantics) ---- */

static int is_control(int32_t c)
{
    if (c == '\t' || c == '\n' || c == '\r')
        return 0;
    switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
        return 1;
    default:
        return 0;
    }
}

static int is_bert_whitespace(int32_t c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || utf8proc_category(c) == UTF8PROC_CATEGORY_ZS;
}

/* str.isspace(): bidirectional class WS, B or S, or category Zs */
static int is_py_space(int32_t c)
{
    if ((c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
        (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000)
        return 1;
    return 0;
}

static int is_punct(int32_t c)
{
    if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126))
        return 1;
    switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
        return 1;
    default:
        return 0;
    }
}

static int is_cjk(int32_t c)
{
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* Unicode "Cased" (Lu, Ll, Lt, or has a case mapping) -- for the final-sigma rule */
static int is_cased(int32_t c)
{
    utf8proc_category_t cat = utf8proc_category(c);
    return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT || utf8proc_tolower(c) != c ||
           utf8proc_toupper(c) != c;
}

/* Unicode "Case_Ignorable": Mn, Me, Cf, Lm, Sk, or Word_Break MidLetter/MidNumLet/Single_Quote */
static int is_case_ignorable(int32_t c)
{
    switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_SK:
        return 1;
    default:
        break;
    }
    static const int32_t mid[] = {0x27,   0x2E,   0x3A,   0xB7,   0x387,  0x55F,  0x5F4,  0x2018, 0x2019,
                                  0x2024, 0x2027, 0xFE13, 0xFE52, 0xFE55, 0xFF07, 0xFF0E, 0xFF1A};
    for (size_t i = 0; i < sizeof(mid) / sizeof(mid[0]); ++i)
        if (c == mid[i])
            return 1;
    return 0;
}

/* ---- growable code point buffers ---- */

typedef struct st_cpbuf_t {
    int32_t *v;
    size_t n, cap;
} cpbuf_t;

static void cp_reserve(cpbuf_t *b, size_t extra)
{
    if (b->n + extra <= b->cap)
        return;
    size_t cap = b->cap != 0 ? b->cap : 64;
    while (cap < b->n + extra)
        cap *= 2;
    b->v = realloc(b->v, cap * sizeof(*b->v));
    if (b->v == NULL)
        abort();
    b->cap = cap;
}

static void cp_push(cpbuf_t *b, int32_t c)
{
    cp_reserve(b, 1);
    b->v[b->n++] = c;
}

/* UTF-8 encode `n` code points into `*out` (grown as needed); returns the byte length */
static size_t encode_utf8(const int32_t *cp, size_t n, char **out, size_t *cap)
{
    if (*cap < n * 4 + 1) {
        *cap = n * 4 + 1;
        *out = realloc(*out, *cap);
        if (*out == NULL)
            abort();
    }
    size_t len = 0;
    for (size_t i = 0; i < n; ++i)
        len += (size_t)utf8proc_encode_char(cp[i], (utf8proc_uint8_t *)*out + len);
    (*out)[len] = '\0';
    return len;
}

/* Canonical (de)composition of `in` into `out`: NFC when compose, NFD otherwise. */
static void normalize(const int32_t *in, size_t n, int compose, cpbuf_t *out, char **scratch, size_t *scratch_cap)
{
    out->n = 0;
    if (n == 0)
        return;
    size_t len = encode_utf8(in, n, scratch, scratch_cap);
    utf8proc_option_t opt = UTF8PROC_STABLE | (compose ? UTF8PROC_COMPOSE : UTF8PROC_DECOMPOSE);
    for (;;) {
        cp_reserve(out, n * 2 + 16);
        utf8proc_ssize_t r =
            utf8proc_decompose((const utf8proc_uint8_t *)*scratch, (utf8proc_ssize_t)len, out->v, (utf8proc_ssize_t)out->cap, opt);
        if (r < 0) { /* cannot happen on valid input; keep the text as it is */
            memcpy(out->v, in, n * sizeof(*in));
            out->n = n;
            return;
        }
        if ((size_t)r > out->cap) {
            cp_reserve(out, (size_t)r);
            continue;
        }
        if (compose) {
            r = utf8proc_normalize_utf32(out->v, r, opt);
            if (r < 0) {
                memcpy(out->v, in, n * sizeof(*in));
                out->n = n;
                return;
            }
        }
        out->n = (size_t)r;
        return;
    }
}

/* ---- the tokenizer proper ---- */

typedef struct st_tok_t {
    const sg_wp_t *wp;
    int32_t *ids;
    size_t n_ids; /* pieces counted so far */
    size_t cap;   /* pieces written to ids: the first `cap` */
    size_t limit; /* counting stops here (>= cap) */
    cpbuf_t a, b, c, word;
    char *s1, *s2;
    size_t s1_cap, s2_cap;
} tok_t;

static int full(const tok_t *t)
{
    return t->n_ids >= t->limit;
}

static void emit(tok_t *t, int32_t id)
{
    if (t->n_ids >= t->limit)
        return;
    if (t->n_ids < t->cap)
        t->ids[t->n_ids] = id;
    ++t->n_ids;
}

/* WordPiece over one basic token (code points). */
static void wordpiece(tok_t *t, const int32_t *cp, size_t n)
{
    if (n == 0)
        return;
    if (n > MAX_WORD_CHARS) {
        emit(t, t->wp->unk);
        return;
    }
    /* byte offset of each code point, with "##" room in front */
    size_t off[MAX_WORD_CHARS + 1];
    char buf[MAX_WORD_CHARS * 4 + 3];
    buf[0] = '#';
    buf[1] = '#';
    size_t len = 0;
    for (size_t i = 0; i < n; ++i) {
        off[i] = len;
        len += (size_t)utf8proc_encode_char(cp[i], (utf8proc_uint8_t *)buf + 2 + len);
    }
    off[n] = len;
    int32_t pieces[MAX_WORD_CHARS];
    size_t n_pieces = 0, start = 0;
    while (start < n) {
        int32_t found = -1;
        size_t end = n;
        /* pieces longer than the longest token cannot match: skip their lookups (a long word
         * would otherwise cost a quadratic number of them) */
        while (end > start + 1 && off[end] - off[start] + (start > 0 ? 2 : 0) > t->wp->max_tok_len)
            --end;
        for (; end > start; --end) {
            const char *s = buf + 2 + off[start];
            size_t sl = off[end] - off[start];
            if (start > 0) {
                s -= 2;
                sl += 2;
                /* the "##" prefix lives right before the piece: write it there temporarily */
                char save0 = buf[2 + off[start] - 2], save1 = buf[2 + off[start] - 1];
                buf[2 + off[start] - 2] = '#';
                buf[2 + off[start] - 1] = '#';
                found = sg_wp_lookup(t->wp, s, sl);
                buf[2 + off[start] - 2] = save0;
                buf[2 + off[start] - 1] = save1;
            } else {
                found = sg_wp_lookup(t->wp, s, sl);
            }
            if (found >= 0)
                break;
        }
        if (found < 0) {
            emit(t, t->wp->unk);
            return;
        }
        pieces[n_pieces++] = found;
        start = end;
    }
    for (size_t i = 0; i < n_pieces; ++i)
        emit(t, pieces[i]);
}

/* Lower-case (Python str.lower) + strip accents + punctuation split + WordPiece for one
 * whitespace token. */
static void word(tok_t *t, const int32_t *cp, size_t n)
{
    cpbuf_t *lw = &t->b;
    lw->n = 0;
    for (size_t i = 0; i < n; ++i) {
        int32_t c = cp[i];
        if (c == 0x130) { /* LATIN CAPITAL LETTER I WITH DOT ABOVE -> i + COMBINING DOT ABOVE */
            cp_push(lw, 'i');
            cp_push(lw, 0x307);
        } else if (c == 0x3A3) { /* GREEK CAPITAL SIGMA: final form at the end of a word */
            ptrdiff_t j = (ptrdiff_t)i - 1;
            while (j >= 0 && is_case_ignorable(cp[j]))
                --j;
            int final = j >= 0 && is_cased(cp[j]);
            if (final) {
                size_t k = i + 1;
                while (k < n && is_case_ignorable(cp[k]))
                    ++k;
                final = k == n || !is_cased(cp[k]);
            }
            cp_push(lw, final ? 0x3C2 : 0x3C3);
        } else {
            cp_push(lw, utf8proc_tolower(c));
        }
    }
    cpbuf_t *nfd = &t->c;
    normalize(lw->v, lw->n, 0, nfd, &t->s2, &t->s2_cap);
    /* drop Mn, split on punctuation */
    cpbuf_t *w = &t->word;
    w->n = 0;
    for (size_t i = 0; i < nfd->n && !full(t); ++i) {
        int32_t c = nfd->v[i];
        if (utf8proc_category(c) == UTF8PROC_CATEGORY_MN)
            continue;
        if (is_punct(c)) {
            wordpiece(t, w->v, w->n);
            w->n = 0;
            wordpiece(t, &c, 1);
        } else {
            cp_push(w, c);
        }
    }
    if (!full(t))
        wordpiece(t, w->v, w->n);
}

/* BasicTokenizer on one piece of text without literal special tokens. */
static void basic(tok_t *t, const char *s, size_t len)
{
    cpbuf_t *a = &t->a;
    a->n = 0;
    size_t i = 0;
    while (i < len) {
        int32_t c;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(len - i), &c);
        if (k <= 0) {
            c = 0xFFFD;
            k = 1;
        }
        i += (size_t)k;
        if (c == 0 || c == 0xFFFD || is_control(c))
            continue;
        if (is_bert_whitespace(c)) {
            cp_push(a, ' ');
        } else if (is_cjk(c)) {
            cp_push(a, ' ');
            cp_push(a, c);
            cp_push(a, ' ');
        } else {
            cp_push(a, c);
        }
    }
    cpbuf_t *nfc = &t->b;
    normalize(a->v, a->n, 1, nfc, &t->s1, &t->s1_cap);
    /* t->b is reused by word(): copy the NFC text to t->a first */
    a->n = 0;
    if (nfc->n == 0) /* no text: both buffers may still be unallocated */
        return;
    cp_reserve(a, nfc->n);
    memcpy(a->v, nfc->v, nfc->n * sizeof(int32_t));
    a->n = nfc->n;
    size_t p = 0;
    while (p < a->n && !full(t)) {
        while (p < a->n && is_py_space(a->v[p]))
            ++p;
        size_t q = p;
        while (q < a->n && !is_py_space(a->v[q]))
            ++q;
        if (q > p) {
            /* word() uses t->b/c/word, never t->a */
            word(t, a->v + p, q - p);
        }
        p = q;
    }
}

/* Which literal special token starts at s (n bytes left)? Its index, or -1. */
static int special_at(const sg_wp_t *wp, const char *s, size_t n, size_t *len)
{
    if (n < 5 || s[0] != '[')
        return -1;
    for (int k = 0; k < 5; ++k) {
        size_t l = strlen(special_names[k]);
        if (wp->special_id[k] >= 0 && n >= l && memcmp(s, special_names[k], l) == 0) {
            *len = l;
            return k;
        }
    }
    return -1;
}

static void run(tok_t *t, const char *s, size_t len)
{
    size_t start = 0, i = 0;
    while (i < len && !full(t)) {
        size_t sl;
        int k = s[i] == '[' ? special_at(t->wp, s + i, len - i, &sl) : -1;
        if (k < 0) {
            ++i;
            continue;
        }
        basic(t, s + start, i - start);
        emit(t, t->wp->special_id[k]);
        i += sl;
        start = i;
    }
    if (!full(t))
        basic(t, s + start, len - start);
}

/* Counts the word pieces of `prefix` + `text` up to `limit`, writing the first `cap` to `ids`;
 * returns the count, or -1 when out of memory. */
static long pieces(const sg_wp_t *wp, const char *prefix, const char *text, size_t len, size_t cap, size_t limit, int32_t *ids)
{
    tok_t t;
    memset(&t, 0, sizeof(t));
    t.wp = wp;
    t.ids = ids;
    t.cap = cap;
    t.limit = limit;
    /* the prefix is part of the text ("query: " + q), so a special token may straddle them */
    size_t pl = prefix != NULL ? strlen(prefix) : 0;
    char *joined = NULL;
    const char *s = text;
    size_t sl = len;
    if (pl > 0) {
        joined = malloc(pl + len + 1);
        if (joined == NULL)
            return -1;
        memcpy(joined, prefix, pl);
        if (len > 0)
            memcpy(joined + pl, text, len);
        s = joined;
        sl = pl + len;
    }
    run(&t, s, sl);
    free(joined);
    free(t.a.v);
    free(t.b.v);
    free(t.c.v);
    free(t.word.v);
    free(t.s1);
    free(t.s2);
    return (long)t.n_ids;
}

int sg_wp_encode(const sg_wp_t *wp, const char *prefix, const char *text, size_t len, uint32_t max_len, int32_t *ids)
{
    if (max_len < 2)
        return -1;
    long n = pieces(wp, prefix, text, len, max_len - 2, max_len - 2, ids + 1);
    if (n < 0)
        return -1;
    ids[0] = wp->cls;
    ids[n + 1] = wp->sep;
    return (int)n + 2;
}

/* How many pieces each segment keeps of a pair truncated to `budget` pieces (max_len - 3):
 * tokenizers' truncate_encodings (LongestFirst) or transformers' truncate_sequences (LONGEST_FIRST).
 * Both keep everything when it fits, and cut only the longer segment when the shorter one takes at
 * most half the budget; when both must be cut, they split the budget in halves, and an odd budget's
 * spare piece goes to the longer segment (the second one on a tie) in tokenizers, always to the
 * first segment in transformers. */
static void pair_lengths(size_t na, size_t nb, size_t budget, int rule, size_t *ka, size_t *kb)
{
    *ka = na;
    *kb = nb;
    if (na + nb <= budget)
        return;
    size_t shorter = na < nb ? na : nb;
    if (2 * shorter <= budget) {
        if (na > nb)
            *ka = budget - nb;
        else
            *kb = budget - na;
        return;
    }
    size_t half = budget / 2, odd = budget % 2;
    int first_gets_spare = rule == SG_WP_TRUNC_SLOW ? 1 : na > nb;
    *ka = half + (first_gets_spare ? odd : 0);
    *kb = half + (first_gets_spare ? 0 : odd);
}

int sg_wp_encode_pair(const sg_wp_t *wp, const char *a, size_t alen, const char *b, size_t blen, uint32_t max_len, int rule,
                      int32_t *ids, uint8_t *types)
{
    if (max_len < 3 || (rule != SG_WP_TRUNC_FAST && rule != SG_WP_TRUNC_SLOW))
        return -1;
    size_t budget = max_len - 3;
    int32_t *bbuf = malloc((budget + 1) * sizeof(*bbuf));
    if (bbuf == NULL)
        return -1;
    /* Counting one piece past the budget tells whether a segment is cut; only when both are longer
     * than the whole budget does the rule need their full lengths (which one is longer). */
    long na = pieces(wp, NULL, a, alen, budget, budget + 1, ids + 1);
    long nb = na < 0 ? -1 : pieces(wp, NULL, b, blen, budget, budget + 1, bbuf);
    if (na > (long)budget && nb > (long)budget && budget % 2 == 1 && rule == SG_WP_TRUNC_FAST) {
        na = pieces(wp, NULL, a, alen, 0, SIZE_MAX, NULL);
        nb = na < 0 ? -1 : pieces(wp, NULL, b, blen, 0, SIZE_MAX, NULL);
    }
    if (na < 0 || nb < 0) {
        free(bbuf);
        return -1;
    }
    size_t ka, kb;
    pair_lengths((size_t)na, (size_t)nb, budget, rule, &ka, &kb);
    ids[0] = wp->cls;
    ids[ka + 1] = wp->sep;
    memcpy(ids + ka + 2, bbuf, kb * sizeof(*ids));
    ids[ka + kb + 2] = wp->sep;
    free(bbuf);
    size_t n = ka + kb + 3;
    if (types != NULL) {
        memset(types, 0, ka + 2);
        memset(types + ka + 2, 1, kb + 1);
    }
    return (int)n;
}
