/*
 * Unit tests: lib/common.c's sg_log_due, the "at most one line per interval, count the rest" of
 * the cache's invalid values, the global rate limit's fallback and the answers' write cuts.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include "common.h"

static void test_log_due(void **state)
{
    (void)state;
    sg_log_every_t e = {0};
    uint64_t skipped = 99;
    assert_true(sg_log_due(&e, 1000, 5, &skipped)); /* the first call logs, whatever the clock */
    assert_int_equal(skipped, 0);
    assert_false(sg_log_due(&e, 1000, 6, &skipped));
    assert_false(sg_log_due(&e, 1000, 1004, &skipped)); /* still inside the interval */
    assert_true(sg_log_due(&e, 1000, 1005, &skipped));
    assert_int_equal(skipped, 2); /* the two refused since the last line */
    assert_false(sg_log_due(&e, 1000, 1500, &skipped));
    assert_true(sg_log_due(&e, 1000, 9000, &skipped));
    assert_int_equal(skipped, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_log_due)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
