/* Unit tests: the calendar periods of spend budgets (gateway/policy/budget.c), UTC, against dates worked
 * out independently (Python's calendar.timegm). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include "budget.h"

static void expect(int period, uint64_t now, uint64_t start, uint64_t end)
{
    uint64_t s = 0, e = 0;
    sg_budget_period(period, now, &s, &e);
    assert_int_equal(s, start);
    assert_int_equal(e, end);
}

static void test_hour_and_day(void **state)
{
    (void)state;
    /* 2026-11-25 16:20:05 */
    expect(SG_PERIOD_HOUR, 1795623605, 1795622400, 1795626000);
    expect(SG_PERIOD_DAY, 1795623605, 1795564800, 1795651200);
    /* the first second of a period belongs to it; the last second of the previous one does not */
    expect(SG_PERIOD_HOUR, 1795622400, 1795622400, 1795626000);
    expect(SG_PERIOD_HOUR, 1795622399, 1795618800, 1795622400);
    expect(SG_PERIOD_DAY, 1795651200, 1795651200, 1795651200 + 86400);
}

static void test_week_starts_on_monday(void **state)
{
    (void)state;
    /* Wednesday 2026-11-25 -> Monday 2026-11-23 .. Monday 2026-11-30 */
    expect(SG_PERIOD_WEEK, 1795623605, 1795392000, 1795996800);
    /* Monday 00:00 starts a new week; Sunday 23:59:59 is still the old one */
    expect(SG_PERIOD_WEEK, 1795996800, 1795996800, 1796601600);
    expect(SG_PERIOD_WEEK, 1795996799, 1795392000, 1795996800);
    /* 1970-01-01 was a Thursday: the first Monday of the epoch is 1970-01-05 */
    expect(SG_PERIOD_WEEK, 345600 + 86400 * 6 + 3599, 345600, 345600 + 7 * 86400);
}

static void test_month(void **state)
{
    (void)state;
    expect(SG_PERIOD_MONTH, 1795623605, 1793491200, 1796083200); /* November 2026 */
    expect(SG_PERIOD_MONTH, 1709251199, 1706745600, 1709251200); /* 2024-02-29 23:59:59: a leap February */
    expect(SG_PERIOD_MONTH, 1709251200, 1709251200, 1709251200 + 31 * 86400);
    expect(SG_PERIOD_MONTH, 1798761599, 1796083200, 1798761600); /* December ends at the new year */
    expect(SG_PERIOD_MONTH, 1798761600, 1798761600, 1801440000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hour_and_day),
        cmocka_unit_test(test_week_starts_on_monday),
        cmocka_unit_test(test_month),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
