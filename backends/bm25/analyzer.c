/*
 * analyzer.c -- Lucene EnglishAnalyzer-like text analysis for the bm25 backend (see analyzer.h).
 *
 * Word segmentation follows the rules of Unicode UAX #29 that decide word tokens, which is what
 * Lucene's StandardTokenizer implements:
 *   WB4        extend and format characters attach to the preceding character;
 *   WB5, 8-10  letters and digits join ("mp3", "b2b");
 *   WB6/7      letters join across one MidLetter/MidNumLet/apostrophe ("can't", "u.s.a", "l'été");
 *   WB11/12    digits join across one MidNum/MidNumLet/apostrophe ("3.14", "1,000,000");
 *   WB13-13b   katakana runs join; "_" and other connector punctuation join everything.
 * Han ideographs and hiragana become one token per character (Lucene's IDEOGRAPHIC and HIRAGANA
 * token types); everything else (spaces, punctuation, symbols, emoji) separates tokens.
 * Format characters (e.g. the soft hyphen) are dropped from the token text; combining marks
 * are kept. Text is NFC-normalised first, so composed and decomposed spellings index alike.
 */
#include "analyzer.h"

#include <libstemmer.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

enum {
    WB_OTHER = 0,
    WB_ALETTER,
    WB_NUMERIC,
    WB_KATAKANA,
    WB_IDEO, /* Han or hiragana: a token of its own */
    WB_EXTNUMLET,
    WB_MIDLETTER,
    WB_MIDNUMLET,
    WB_MIDNUM,
    WB_EXTEND, /* combining marks: kept in the token */
    WB_FORMAT  /* format characters: attach, dropped from the token */
};

struct st_sg_bm25_analyzer_t {
    struct sb_stemmer *stemmer; /* NULL for SG_BM25_STEM_NONE */
    sg_bm25_stopset_t stopset;
    /* scratch: the decoded text */
    int32_t *cp;
    uint8_t *cls;
    size_t cap;
    char word[SG_BM25_MAX_TOKEN_CHARS * 4 + 8];
};

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n != 0 ? n : 1);
    if (q == NULL)
        abort();
    return q;
}

/* ---- character classes ---- */

static int in_list(int32_t c, const int32_t *list, size_t n)
{
    for (size_t i = 0; i < n; ++i)
        if (list[i] == c)
            return 1;
    return 0;
}

static int is_han(int32_t c)
{
    return (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0xF900 && c <= 0xFAFF) ||
           (c >= 0x20000 && c <= 0x323AF) || c == 0x3005 || c == 0x3007 || (c >= 0x3021 && c <= 0x3029) ||
           (c >= 0x3038 && c <= 0x303B);
}

static int is_hiragana(int32_t c)
{
    return (c >= 0x3041 && c <= 0x3096) || (c >= 0x309D && c <= 0x309F) || (c >= 0x1B001 && c <= 0x1B11F);
}

static int is_katakana(int32_t c)
{
    return (c >= 0x30A1 && c <= 0x30FA) || (c >= 0x30FC && c <= 0x30FF) || (c >= 0x31F0 && c <= 0x31FF) ||
           (c >= 0xFF66 && c <= 0xFF9D) || c == 0x1B000;
}

static uint8_t classify(int32_t c)
{
    if (c < 0x80) {
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
            return WB_ALETTER;
        if (c >= '0' && c <= '9')
            return WB_NUMERIC;
        switch (c) {
        case '_':
            return WB_EXTNUMLET;
        case '\'':
        case '.':
            return WB_MIDNUMLET;
        case ':':
            return WB_MIDLETTER;
        case ',':
        case ';':
            return WB_MIDNUM;
        default:
            return WB_OTHER;
        }
    }
    static const int32_t midletter[] = {0xB7, 0x387, 0x55F, 0x5F4, 0x2027, 0xFE13, 0xFE55, 0xFF1A};
    static const int32_t midnumlet[] = {0x2018, 0x2019, 0x2024, 0xFE52, 0xFF07, 0xFF0E};
    static const int32_t midnum[] = {0x37E,  0x589,  0x60C,  0x60D,  0x66C,  0x7F8, 0x2044,
                                     0xFE10, 0xFE14, 0xFE50, 0xFE54, 0xFF0C, 0xFF1B};
    if (in_list(c, midnumlet, sizeof(midnumlet) / sizeof(midnumlet[0])))
        return WB_MIDNUMLET;
    if (in_list(c, midletter, sizeof(midletter) / sizeof(midletter[0])))
        return WB_MIDLETTER;
    if (in_list(c, midnum, sizeof(midnum) / sizeof(midnum[0])))
        return WB_MIDNUM;
    if (c == 0x202F)
        return WB_EXTNUMLET;
    utf8proc_category_t cat = utf8proc_category(c);
    switch (cat) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_NL:
        if (is_han(c) || is_hiragana(c))
            return WB_IDEO;
        if (is_katakana(c))
            return WB_KATAKANA;
        return WB_ALETTER;
    case UTF8PROC_CATEGORY_ND:
        return WB_NUMERIC;
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
        return WB_EXTEND;
    case UTF8PROC_CATEGORY_CF:
        return WB_FORMAT;
    case UTF8PROC_CATEGORY_PC:
        return WB_EXTNUMLET;
    default:
        return WB_OTHER;
    }
}

static int joins(uint8_t last, uint8_t next)
{
    switch (last) {
    case WB_ALETTER:
    case WB_NUMERIC:
        return next == WB_ALETTER || next == WB_NUMERIC || next == WB_EXTNUMLET;
    case WB_KATAKANA:
        return next == WB_KATAKANA || next == WB_EXTNUMLET;
    case WB_EXTNUMLET:
        return next == WB_ALETTER || next == WB_NUMERIC || next == WB_KATAKANA || next == WB_EXTNUMLET;
    default:
        return 0;
    }
}

/* ---- stop words ---- */

/* Lucene's EnglishAnalyzer.ENGLISH_STOP_WORDS_SET, sorted. */
static const char *const stopwords[] = {"a",   "an",    "and",  "are",   "as",    "at",   "be",   "but", "by",  "for",  "if",
                                        "in",  "into",  "is",   "it",    "no",    "not",  "of",   "on",  "or",  "such", "that",
                                        "the", "their", "then", "there", "these", "they", "this", "to",  "was", "will", "with"};

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int sg_bm25_is_stopword(const char *w, size_t len)
{
    if (len == 0 || len > 5)
        return 0;
    return bsearch(&w, stopwords, sizeof(stopwords) / sizeof(stopwords[0]), sizeof(stopwords[0]), cmp_str) != NULL;
}

/* ---- names ---- */

int sg_bm25_stemmer_parse(const char *name, sg_bm25_stemmer_t *out)
{
    static const char *const names[] = {"porter", "english", "none"};
    for (int i = 0; i < 3; ++i)
        if (strcmp(name, names[i]) == 0) {
            *out = (sg_bm25_stemmer_t)i;
            return 0;
        }
    return -1;
}

const char *sg_bm25_stemmer_name(sg_bm25_stemmer_t s)
{
    return s == SG_BM25_STEM_PORTER ? "porter" : s == SG_BM25_STEM_ENGLISH ? "english" : "none";
}

int sg_bm25_stopset_parse(const char *name, sg_bm25_stopset_t *out)
{
    if (strcmp(name, "lucene") == 0)
        *out = SG_BM25_STOP_LUCENE;
    else if (strcmp(name, "none") == 0)
        *out = SG_BM25_STOP_NONE;
    else
        return -1;
    return 0;
}

const char *sg_bm25_stopset_name(sg_bm25_stopset_t s)
{
    return s == SG_BM25_STOP_LUCENE ? "lucene" : "none";
}

/* ---- analyzer ---- */

sg_bm25_analyzer_t *sg_bm25_analyzer_new(sg_bm25_stemmer_t stemmer, sg_bm25_stopset_t stopset)
{
    sg_bm25_analyzer_t *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return NULL;
    a->stopset = stopset;
    if (stemmer != SG_BM25_STEM_NONE) {
        a->stemmer = sb_stemmer_new(stemmer == SG_BM25_STEM_PORTER ? "porter" : "english", "UTF_8");
        if (a->stemmer == NULL) {
            free(a);
            return NULL;
        }
    }
    return a;
}

void sg_bm25_analyzer_free(sg_bm25_analyzer_t *a)
{
    if (a == NULL)
        return;
    if (a->stemmer != NULL)
        sb_stemmer_delete(a->stemmer);
    free(a->cp);
    free(a->cls);
    free(a);
}

void sg_bm25_tokens_free(sg_bm25_tokens_t *t)
{
    free(t->buf);
    free(t->off);
    memset(t, 0, sizeof(*t));
}

static void push_token(sg_bm25_tokens_t *t, const char *s, size_t n)
{
    if (t->n == t->off_cap) {
        t->off_cap = t->off_cap != 0 ? t->off_cap * 2 : 64;
        t->off = xrealloc(t->off, t->off_cap * sizeof(*t->off));
    }
    if (t->len + n + 1 > t->cap) {
        while (t->len + n + 1 > t->cap)
            t->cap = t->cap != 0 ? t->cap * 2 : 1024;
        t->buf = xrealloc(t->buf, t->cap);
    }
    t->off[t->n++] = (uint32_t)t->len;
    memcpy(t->buf + t->len, s, n);
    t->len += n;
    t->buf[t->len++] = '\0';
}

/* Filters one segmented word (code points [from, to) of the scratch text) and appends the result. */
static void emit(sg_bm25_analyzer_t *a, size_t from, size_t to, sg_bm25_tokens_t *out)
{
    size_t n = 0;
    for (size_t i = from; i < to; ++i) {
        if (a->cls[i] == WB_FORMAT)
            continue;
        utf8proc_int32_t lc = utf8proc_tolower(a->cp[i]);
        n += (size_t)utf8proc_encode_char(lc, (utf8proc_uint8_t *)a->word + n);
    }
    /* possessive: drop a trailing 's after an apostrophe (' U+2019 U+FF07), like EnglishPossessiveFilter */
    if (n >= 2 && a->word[n - 1] == 's') {
        if (a->word[n - 2] == '\'')
            n -= 2;
        else if (n >= 4 && memcmp(a->word + n - 4, "\xE2\x80\x99", 3) == 0)
            n -= 4;
        else if (n >= 4 && memcmp(a->word + n - 4, "\xEF\xBC\x87", 3) == 0)
            n -= 4;
    }
    if (n == 0)
        return;
    a->word[n] = '\0';
    if (a->stopset == SG_BM25_STOP_LUCENE && sg_bm25_is_stopword(a->word, n))
        return;
    if (a->stemmer != NULL) {
        const sb_symbol *s = sb_stemmer_stem(a->stemmer, (const sb_symbol *)a->word, (int)n);
        if (s == NULL)
            abort(); /* out of memory inside Snowball */
        int sl = sb_stemmer_length(a->stemmer);
        if (sl > 0)
            push_token(out, (const char *)s, (size_t)sl);
        return;
    }
    push_token(out, a->word, n);
}

static int is_word_class(uint8_t c)
{
    return c == WB_ALETTER || c == WB_NUMERIC || c == WB_KATAKANA;
}

size_t sg_bm25_analyze(sg_bm25_analyzer_t *a, const char *text, size_t len, sg_bm25_tokens_t *out)
{
    out->len = 0;
    out->n = 0;
    if (len == 0)
        return 0;
    /* NFC when the text is not plain ASCII (and is valid UTF-8: otherwise decode it as it is) */
    utf8proc_uint8_t *norm = NULL;
    const utf8proc_uint8_t *src = (const utf8proc_uint8_t *)text;
    size_t srclen = len;
    for (size_t i = 0; i < len; ++i) {
        if ((unsigned char)text[i] >= 0x80) {
            utf8proc_ssize_t r = utf8proc_map(src, (utf8proc_ssize_t)len, &norm, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
            if (r >= 0) {
                src = norm;
                srclen = (size_t)r;
            } else {
                norm = NULL;
            }
            break;
        }
    }
    /* decode into code points and word-break classes; invalid bytes become separators */
    if (srclen + 1 > a->cap) {
        a->cap = srclen + 1;
        a->cp = xrealloc(a->cp, a->cap * sizeof(*a->cp));
        a->cls = xrealloc(a->cls, a->cap);
    }
    size_t n = 0;
    for (size_t i = 0; i < srclen;) {
        utf8proc_int32_t c;
        if (src[i] < 0x80) {
            c = src[i];
            i += 1;
        } else {
            utf8proc_ssize_t k = utf8proc_iterate(src + i, (utf8proc_ssize_t)(srclen - i), &c);
            if (k <= 0) {
                c = ' ';
                k = 1;
            }
            i += (size_t)k;
        }
        a->cp[n] = c;
        a->cls[n] = classify(c);
        ++n;
    }
    free(norm);

    size_t i = 0;
    while (i < n) {
        uint8_t c = a->cls[i];
        if (c == WB_IDEO) {
            size_t j = i + 1;
            while (j < n && (a->cls[j] == WB_EXTEND || a->cls[j] == WB_FORMAT))
                ++j;
            emit(a, i, j - i > SG_BM25_MAX_TOKEN_CHARS ? i + SG_BM25_MAX_TOKEN_CHARS : j, out);
            i = j;
            continue;
        }
        if (!is_word_class(c) && c != WB_EXTNUMLET) {
            ++i;
            continue;
        }
        size_t start = i, chars = 1;
        int has_word = is_word_class(c);
        uint8_t last = c;
        ++i;
        for (;;) {
            while (i < n && (a->cls[i] == WB_EXTEND || a->cls[i] == WB_FORMAT)) {
                if (chars == SG_BM25_MAX_TOKEN_CHARS) {
                    if (has_word)
                        emit(a, start, i, out);
                    start = i;
                    chars = 0;
                    has_word = 0;
                }
                ++i;
                ++chars;
            }
            if (i >= n)
                break;
            uint8_t d = a->cls[i];
            size_t take = 0; /* code points to add */
            if (joins(last, d)) {
                take = 1;
            } else if (d == WB_MIDLETTER || d == WB_MIDNUMLET || d == WB_MIDNUM) {
                size_t j = i + 1;
                while (j < n && (a->cls[j] == WB_EXTEND || a->cls[j] == WB_FORMAT))
                    ++j;
                if (j < n) {
                    uint8_t e = a->cls[j];
                    if (last == WB_ALETTER && e == WB_ALETTER && (d == WB_MIDLETTER || d == WB_MIDNUMLET))
                        take = j - i + 1;
                    else if (last == WB_NUMERIC && e == WB_NUMERIC && (d == WB_MIDNUM || d == WB_MIDNUMLET))
                        take = j - i + 1;
                }
            }
            if (take == 0 || take > SG_BM25_MAX_TOKEN_CHARS / 2)
                break;
            if (chars + take > SG_BM25_MAX_TOKEN_CHARS) {
                /* split an over-long word, like StandardTokenizer's maxTokenLength */
                if (has_word)
                    emit(a, start, i, out);
                start = i;
                chars = 0;
                has_word = 0;
            }
            i += take;
            chars += take;
            last = a->cls[i - 1];
            if (is_word_class(last))
                has_word = 1;
        }
        if (has_word)
            emit(a, start, i, out);
    }
    return out->n;
}
