/* Unit tests: the rerank stage's passages (gateway/routes/rerank.c). Its settings:
 * config/test_rerank_conf.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "rerank.h"

static void check_passage(const char *doc, const char *want)
{
    sg_buf_t b = {0};
    sg_buf_appends(&b, "prefix|");
    size_t n = sg_rerank_passage(doc, strlen(doc), &b);
    assert_int_equal(n, strlen(want));
    assert_int_equal(b.len, 7 + strlen(want));
    assert_memory_equal(b.base + 7, want, n);
    sg_buf_free(&b);
}

static void test_passage(void **state)
{
    (void)state;
    /* Search-R1: title = contents.split("\n")[0], text = "\n".join(the rest) */
    check_passage("{\"id\":\"1\",\"contents\":\"\\\"Paris\\\"\\nParis is the capital.\"}",
                  "(Title: \"Paris\") Paris is the capital.");
    check_passage("{\"contents\":\"T\\nline one\\nline two\\n\"}", "(Title: T) line one\nline two\n");
    check_passage("{\"contents\":\"no newline at all\"}", "(Title: no newline at all) ");
    check_passage("{\"contents\":\"\"}", "(Title: ) ");
    check_passage("{\"contents\":\"\\nonly text\"}", "(Title: ) only text");
    check_passage("{\"contents\":\"Zürich 東京\\n\\u00e9t\\u00e9 🚀\"}", "(Title: Zürich 東京) été 🚀");
    /* without contents: the title and text fields (RLinf-style pages, Qdrant payloads) */
    check_passage("{\"title\":\"Hamlet\",\"text\":\"A tragedy.\",\"url\":\"u\"}", "(Title: Hamlet) A tragedy.");
    check_passage("{\"text\":\"body only\"}", "(Title: ) body only");
    check_passage("{\"contents\":42,\"title\":\"t\"}", "(Title: t) ");
    check_passage("{}", "(Title: ) ");
    check_passage("not json", "(Title: ) ");
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_passage)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
