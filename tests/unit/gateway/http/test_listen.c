/* Unit tests: gateway/http/listen.c -- resolving, the exclusive-port probe, and the /proc check that
 * finds a listener on our port that is not one of ours (another process joining the
 * SO_REUSEPORT group between the probe and the binds). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "listen.h"

static void test_resolve(void **state)
{
    (void)state;
    sg_listen_addr_t a;
    char err[512];
    assert_int_equal(sg_listen_resolve("127.0.0.1", 0, &a, err, sizeof(err)), 0);
    assert_int_equal(sg_listen_resolve("999.1.1.1", 8000, &a, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "listen.host 999.1.1.1"));
}

static void test_probe_names_the_holder(void **state)
{
    (void)state;
    sg_listen_addr_t any, a;
    char err[512], expect[64];
    uint16_t port = 0;
    assert_int_equal(sg_listen_resolve("127.0.0.1", 0, &any, err, sizeof(err)), 0);
    int fd = sg_listen_open(&any, 0, &port, err, sizeof(err));
    assert_true(fd >= 0);
    assert_true(port != 0);
    assert_int_equal(sg_listen_resolve("127.0.0.1", port, &a, err, sizeof(err)), 0);
    assert_int_equal(sg_listen_probe(&a, err, sizeof(err)), -1);
    snprintf(expect, sizeof(expect), "port %u is already in use by pid %ld (", port, (long)getpid());
    assert_non_null(strstr(err, expect));
    /* the wildcard address overlaps 127.0.0.1 */
    sg_listen_addr_t wild;
    assert_int_equal(sg_listen_resolve("0.0.0.0", port, &wild, err, sizeof(err)), 0);
    assert_int_equal(sg_listen_probe(&wild, err, sizeof(err)), -1);
    close(fd);
    assert_int_equal(sg_listen_probe(&a, err, sizeof(err)), 0);
}

static void test_exclusive_check(void **state)
{
    (void)state;
    sg_listen_addr_t a;
    char err[512];
    uint16_t port = 0, port2 = 0;
    assert_int_equal(sg_listen_resolve("127.0.0.1", 0, &a, err, sizeof(err)), 0);
    int fds[2];
    fds[0] = sg_listen_open(&a, 0, &port, err, sizeof(err));
    assert_true(fds[0] >= 0);
    assert_int_equal(sg_listen_check_exclusive(&a, port, fds, 1, err, sizeof(err)), 0);
    /* a second member of the SO_REUSEPORT group that is not in our list: someone else's */
    fds[1] = sg_listen_open(&a, port, &port2, err, sizeof(err));
    assert_true(fds[1] >= 0);
    assert_int_equal(port2, port);
    assert_int_equal(sg_listen_check_exclusive(&a, port, fds, 1, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "is already in use by pid"));
    assert_int_equal(sg_listen_check_exclusive(&a, port, fds, 2, err, sizeof(err)), 0);
    char who[256];
    assert_int_equal(sg_listen_holders(&a, port, fds, 2, who, sizeof(who)), 0);
    assert_int_equal(sg_listen_holders(&a, port, fds, 1, who, sizeof(who)), 1);
    close(fds[0]);
    close(fds[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resolve),
        cmocka_unit_test(test_probe_names_the_holder),
        cmocka_unit_test(test_exclusive_check),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
