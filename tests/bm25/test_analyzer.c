/*
 * test_analyzer.c -- the bm25 analyzer (backends/bm25/analyzer.c): stop words, possessives,
 * Porter and Porter2 stemming, UAX #29 segmentation of Unicode text, and the degenerate inputs
 * (empty, punctuation-only, invalid UTF-8, over-long words) that must give zero tokens or
 * bounded tokens rather than errors.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "analyzer.h"

/* Analyzes `text` and returns its tokens joined by single spaces (static buffer). */
static const char *run(sg_bm25_stemmer_t stem, sg_bm25_stopset_t stop, const char *text, size_t len)
{
    static char out[8192];
    sg_bm25_analyzer_t *a = sg_bm25_analyzer_new(stem, stop);
    assert_non_null(a);
    sg_bm25_tokens_t t = {0};
    size_t n = sg_bm25_analyze(a, text, len, &t);
    size_t o = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n; ++i)
        o += (size_t)snprintf(out + o, sizeof(out) - o, "%s%s", i > 0 ? " " : "", sg_bm25_token(&t, i));
    assert_int_equal(n, t.n);
    sg_bm25_tokens_free(&t);
    sg_bm25_analyzer_free(a);
    return out;
}

static const char *en(const char *text)
{
    return run(SG_BM25_STEM_PORTER, SG_BM25_STOP_LUCENE, text, strlen(text));
}

static void test_lowercase_and_stopwords(void **state)
{
    (void)state;
    assert_string_equal(en("The Quick Brown Foxes"), "quick brown fox");
    assert_string_equal(en("This is not such a thing"), "thing");
    /* every one of Lucene's 33 English stop words goes; words outside the set stay */
    assert_string_equal(en("a an and are as at be but by for if in into is it no not of on or such that the their then there "
                           "these they this to was will with"),
                        "");
    assert_string_equal(en("What is a volcano?"), "what volcano");
    assert_string_equal(en("THE WHO"), "who");
    assert_int_equal(sg_bm25_is_stopword("the", 3), 1);
    assert_int_equal(sg_bm25_is_stopword("then", 4), 1);
    assert_int_equal(sg_bm25_is_stopword("what", 4), 0);
    assert_int_equal(sg_bm25_is_stopword("", 0), 0);
    /* without the stop set, stop words are kept (and stemmed) */
    assert_string_equal(run(SG_BM25_STEM_PORTER, SG_BM25_STOP_NONE, "The Beatles", 11), "the beatl");
}

static void test_stemming(void **state)
{
    (void)state;
    /* Snowball "porter" = the original Porter algorithm of Lucene's PorterStemFilter */
    assert_string_equal(en("running runs ran"), "run run ran");
    assert_string_equal(en("caresses ponies relational generalizations generously"), "caress poni relat gener gener");
    assert_string_equal(en("volcanoes volcano volcanic"), "volcano volcano volcan");
    /* Porter2 differs on some words */
    assert_string_equal(run(SG_BM25_STEM_ENGLISH, SG_BM25_STOP_LUCENE, "generalizations generously", 26), "general generous");
    /* no stemming at all */
    assert_string_equal(run(SG_BM25_STEM_NONE, SG_BM25_STOP_NONE, "The Running Dogs", 16), "the running dogs");
}

static void test_possessive(void **state)
{
    (void)state;
    assert_string_equal(en("John's book"), "john book");
    assert_string_equal(en("JOHN'S BOOK"), "john book");
    assert_string_equal(en("James\xE2\x80\x99s car"), "jame car"); /* U+2019 apostrophe */
    assert_string_equal(en("don't can't"), "don't can't");
}

static void test_unicode(void **state)
{
    (void)state;
    assert_string_equal(en("Zürich"), "zürich");
    /* decomposed input (u + U+0308) is NFC-normalised: the same token as the composed spelling */
    assert_string_equal(en("Zu\xCC\x88rich"), "zürich");
    assert_string_equal(en("ΑΘΗΝΑ"), "αθηνα");
    /* Han ideographs are one token each; katakana runs and Hangul words stay whole */
    assert_string_equal(en("東京都"), "東 京 都");
    assert_string_equal(en("コンピュータ"), "コンピュータ");
    assert_string_equal(en("서울 naïve café"), "서울 naïv café");
    /* format characters (soft hyphen) join and vanish; emoji separate */
    assert_string_equal(en("co\xC2\xADoperate"), "cooper");
    assert_string_equal(en("\xF0\x9F\x94\xA5"
                           "fire"),
                        "fire");
}

static void test_word_breaks(void **state)
{
    (void)state;
    /* UAX #29: letters across MidLetter/MidNumLet, digits across MidNum/MidNumLet */
    assert_string_equal(en("3.14 1,000,000 U.S.A. mp3 e-mail"), "3.14 1,000,000 u.s.a mp3 e mail");
    assert_string_equal(en("a:b l'été x.y 3.a"), "a:b l'été x.y 3");
    assert_string_equal(en("foo_bar ___ _x"), "foo_bar _x");
    assert_string_equal(en("end. Next,word;x"), "end next word x");
}

static void test_degenerate(void **state)
{
    (void)state;
    assert_string_equal(run(SG_BM25_STEM_PORTER, SG_BM25_STOP_LUCENE, "", 0), "");
    assert_string_equal(en("!!! ... ??? --- ''' \"\" ()[]{}"), "");
    assert_string_equal(en("   \t\r\n  "), "");
    /* invalid UTF-8 separates tokens and is otherwise ignored */
    assert_string_equal(run(SG_BM25_STEM_PORTER, SG_BM25_STOP_LUCENE,
                            "\xFF\xFE"
                            "abc\xC3",
                            6),
                        "abc");
    assert_string_equal(run(SG_BM25_STEM_PORTER, SG_BM25_STOP_LUCENE,
                            "ab\x80"
                            "cd",
                            5),
                        "ab cd");
    /* NUL bytes are separators too */
    assert_string_equal(run(SG_BM25_STEM_NONE, SG_BM25_STOP_NONE, "ab\0cd", 5), "ab cd");
    /* a word longer than 255 characters is split, like StandardTokenizer's maxTokenLength */
    char w[601];
    memset(w, 'x', 600);
    w[600] = '\0';
    sg_bm25_analyzer_t *a = sg_bm25_analyzer_new(SG_BM25_STEM_NONE, SG_BM25_STOP_NONE);
    sg_bm25_tokens_t t = {0};
    assert_int_equal(sg_bm25_analyze(a, w, 600, &t), 3);
    assert_int_equal(strlen(sg_bm25_token(&t, 0)), 255);
    assert_int_equal(strlen(sg_bm25_token(&t, 1)), 255);
    assert_int_equal(strlen(sg_bm25_token(&t, 2)), 90);
    /* a letter followed by thousands of combining marks stays bounded */
    static char marks[2 + 2 * 3000];
    marks[0] = 'a';
    for (int i = 0; i < 3000; ++i)
        memcpy(marks + 1 + 2 * i, "\xCC\x81", 2);
    size_t n = sg_bm25_analyze(a, marks, 1 + 2 * 3000, &t);
    assert_true(n >= 1);
    for (size_t i = 0; i < n; ++i)
        assert_true(strlen(sg_bm25_token(&t, i)) <= 4 * SG_BM25_MAX_TOKEN_CHARS);
    /* reuse: the same analyzer and token list give the same answer twice */
    assert_int_equal(sg_bm25_analyze(a, "alpha beta", 10, &t), 2);
    assert_int_equal(sg_bm25_analyze(a, "alpha beta", 10, &t), 2);
    assert_string_equal(sg_bm25_token(&t, 1), "beta");
    sg_bm25_tokens_free(&t);
    sg_bm25_analyzer_free(a);
}

static void test_names(void **state)
{
    (void)state;
    sg_bm25_stemmer_t s;
    sg_bm25_stopset_t p;
    assert_int_equal(sg_bm25_stemmer_parse("porter", &s), 0);
    assert_int_equal(s, SG_BM25_STEM_PORTER);
    assert_int_equal(sg_bm25_stemmer_parse("english", &s), 0);
    assert_int_equal(s, SG_BM25_STEM_ENGLISH);
    assert_int_equal(sg_bm25_stemmer_parse("krovetz", &s), -1);
    assert_string_equal(sg_bm25_stemmer_name(SG_BM25_STEM_NONE), "none");
    assert_int_equal(sg_bm25_stopset_parse("lucene", &p), 0);
    assert_int_equal(sg_bm25_stopset_parse("smart", &p), -1);
    assert_string_equal(sg_bm25_stopset_name(SG_BM25_STOP_NONE), "none");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lowercase_and_stopwords),
        cmocka_unit_test(test_stemming),
        cmocka_unit_test(test_possessive),
        cmocka_unit_test(test_unicode),
        cmocka_unit_test(test_word_breaks),
        cmocka_unit_test(test_degenerate),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
