/*
 * Unit tests: gateway/core/notify.c, sd_notify by hand. The test is systemd's end: a Unix datagram
 * socket bound in a temporary directory (and one in the abstract namespace, "@name"), named by
 * $NOTIFY_SOCKET; it reads back the exact datagrams of sg_notify, sg_notify_event and
 * sg_notify_reloading (MONOTONIC_USEC on CLOCK_MONOTONIC), the messages of the failures (socket
 * missing, a name that is neither a path nor @name), sg_notify_event's one warning per process,
 * and sg_notify_watchdog_usec with $WATCHDOG_USEC / $WATCHDOG_PID set and unset.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "../notify_sock.h"
#include "notify.h"

static char dir[64];
static char path[128];
static int fd = -1;

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/sg_notify_XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/notify", dir);
    fd = notify_sock_bind(path);
    assert_true(fd >= 0);
    setenv("NOTIFY_SOCKET", path, 1);
    unsetenv("WATCHDOG_USEC");
    unsetenv("WATCHDOG_PID");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unsetenv("NOTIFY_SOCKET");
    close(fd);
    unlink(path);
    rmdir(dir);
    return 0;
}

/* the next datagram, which must come */
static void next(char *out, size_t size)
{
    assert_true(notify_sock_next(fd, out, size, 5000) >= 0);
}

/* nothing more was sent */
static void none_left(void)
{
    char out[64];
    assert_int_equal(notify_sock_next(fd, out, sizeof(out), 50), -1);
}

static void test_notify_path(void **state)
{
    (void)state;
    char err[256] = "", got[512];
    assert_int_equal(sg_notify("READY=1", err, sizeof(err)), 1);
    next(got, sizeof(got));
    assert_string_equal(got, "READY=1");
    assert_int_equal(sg_notify("READY=1\nSTATUS=serving 2 routes", err, sizeof(err)), 1);
    next(got, sizeof(got)); /* one datagram, the lines as given, no NUL and no newline added */
    assert_string_equal(got, "READY=1\nSTATUS=serving 2 routes");
    sg_notify_event("STOPPING=1");
    next(got, sizeof(got));
    assert_string_equal(got, "STOPPING=1");
    assert_string_equal(err, ""); /* never touched when it went */
    none_left();
}

static void test_notify_unset(void **state)
{
    (void)state;
    char err[64] = "untouched";
    unsetenv("NOTIFY_SOCKET");
    assert_int_equal(sg_notify("READY=1", err, sizeof(err)), 0);
    setenv("NOTIFY_SOCKET", "", 1); /* empty: the same as unset */
    assert_int_equal(sg_notify("READY=1", err, sizeof(err)), 0);
    sg_notify_event("READY=1");
    sg_notify_reloading();
    assert_string_equal(err, "untouched");
    setenv("NOTIFY_SOCKET", path, 1);
    none_left();
}

static void test_notify_abstract(void **state)
{
    (void)state;
    char name[64], err[256] = "", got[128];
    snprintf(name, sizeof(name), "@sg-test-notify-%d", (int)getpid());
    int afd = notify_sock_bind(name);
    assert_true(afd >= 0);
    setenv("NOTIFY_SOCKET", name, 1);
    assert_int_equal(sg_notify("READY=1\nSTATUS=abstract", err, sizeof(err)), 1);
    assert_true(notify_sock_next(afd, got, sizeof(got), 5000) >= 0);
    assert_string_equal(got, "READY=1\nSTATUS=abstract");
    close(afd);
    /* nobody bound there any more */
    assert_int_equal(sg_notify("READY=1", err, sizeof(err)), -1);
    char want[128];
    snprintf(want, sizeof(want), "NOTIFY_SOCKET=%s: Connection refused", name);
    assert_string_equal(err, want);
    setenv("NOTIFY_SOCKET", path, 1);
    none_left();
}

static void test_notify_errors(void **state)
{
    (void)state;
    char err[256], want[300];
    char gone[160];
    snprintf(gone, sizeof(gone), "%s/nobody", dir);
    setenv("NOTIFY_SOCKET", gone, 1);
    assert_int_equal(sg_notify("READY=1", err, sizeof(err)), -1);
    snprintf(want, sizeof(want), "NOTIFY_SOCKET=%s: No such file or directory", gone);
    assert_string_equal(err, want);
    /* a file that is no socket */
    char plain[160];
    snprintf(plain, sizeof(plain), "%s/plain", dir);
    int pf = open(plain, O_CREAT | O_WRONLY, 0600);
    assert_true(pf >= 0);
    close(pf);
    setenv("NOTIFY_SOCKET", plain, 1);
    assert_int_equal(sg_notify("READY=1", err, sizeof(err)), -1);
    snprintf(want, sizeof(want), "NOTIFY_SOCKET=%s: Connection refused", plain);
    assert_string_equal(err, want);
    unlink(plain);
    /* neither a path nor @name */
    setenv("NOTIFY_SOCKET", "run/notify", 1);
    assert_int_equal(sg_notify("READY=1", err, sizeof(err)), -1);
    assert_string_equal(err, "NOTIFY_SOCKET=run/notify: expected an absolute path or @name");
    /* too long for sun_path (108 bytes): refused, not truncated to another name */
    char lng[200];
    memset(lng, 'x', sizeof(lng) - 1);
    lng[0] = '/';
    lng[sizeof(lng) - 1] = '\0';
    setenv("NOTIFY_SOCKET", lng, 1);
    assert_int_equal(sg_notify("READY=1", err, sizeof(err)), -1);
    snprintf(want, sizeof(want), "NOTIFY_SOCKET=%.120s: expected an absolute path or @name", lng);
    assert_string_equal(err, want);
    lng[108] = '\0'; /* one too many for the NUL */
    setenv("NOTIFY_SOCKET", lng, 1);
    assert_int_equal(sg_notify("READY=1", err, sizeof(err)), -1);
    snprintf(want, sizeof(want), "NOTIFY_SOCKET=%s: expected an absolute path or @name", lng);
    assert_string_equal(err, want);
    /* the longest that fits: 107 bytes and the NUL */
    lng[107] = '\0';
    setenv("NOTIFY_SOCKET", lng, 1);
    assert_int_equal(sg_notify("READY=1", err, sizeof(err)), -1);
    snprintf(want, sizeof(want), "NOTIFY_SOCKET=%s: No such file or directory", lng);
    assert_string_equal(err, want);
    /* the message fits the caller's buffer */
    char small[16];
    setenv("NOTIFY_SOCKET", gone, 1);
    assert_int_equal(sg_notify("READY=1", small, sizeof(small)), -1);
    assert_string_equal(small, "NOTIFY_SOCKET=/");
    setenv("NOTIFY_SOCKET", path, 1);
    none_left();
}

/* sg_notify_event logs the first failure of the process on stderr, never another (a unit whose
 * socket is gone would log on every watchdog ping else) */
static void test_event_warns_once(void **state)
{
    (void)state;
    char logf[160];
    snprintf(logf, sizeof(logf), "%s/stderr", dir);
    fflush(stderr);
    int saved = dup(2);
    int lf = open(logf, O_CREAT | O_TRUNC | O_RDWR, 0600);
    assert_true(saved >= 0 && lf >= 0);
    dup2(lf, 2);
    setenv("NOTIFY_SOCKET", "relative", 1);
    sg_notify_event("READY=1");
    sg_notify_event("WATCHDOG=1");
    sg_notify_reloading();
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char text[1024];
    ssize_t n = pread(lf, text, sizeof(text) - 1, 0);
    close(lf);
    unlink(logf);
    assert_true(n > 0);
    text[n] = '\0';
    const char *msg = "sd_notify: NOTIFY_SOCKET=relative: expected an absolute path or @name\n";
    const char *at = strstr(text, msg);
    assert_non_null(at);
    assert_string_equal(at, msg); /* the last thing written */
    int lines = 0;
    for (ssize_t i = 0; i < n; ++i)
        lines += text[i] == '\n';
    assert_int_equal(lines, 1);
    setenv("NOTIFY_SOCKET", path, 1);
    none_left();
}

static uint64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void test_reloading(void **state)
{
    (void)state;
    char got[256];
    uint64_t before = mono_us();
    sg_notify_reloading();
    uint64_t after = mono_us();
    next(got, sizeof(got));
    const char *head = "RELOADING=1\nSTATUS=reloading the configuration\nMONOTONIC_USEC=";
    assert_int_equal(strncmp(got, head, strlen(head)), 0);
    const char *num = got + strlen(head);
    char *end;
    unsigned long long us = strtoull(num, &end, 10);
    assert_true(end != num);
    assert_int_equal(*end, '\0'); /* the last line, no newline after */
    assert_true(us >= before && us <= after);
    none_left();
}

static void test_watchdog(void **state)
{
    (void)state;
    char pid[32], other[32];
    snprintf(pid, sizeof(pid), "%d", (int)getpid());
    snprintf(other, sizeof(other), "%d", (int)getpid() + 1);
    assert_int_equal(sg_notify_watchdog_usec(), 0); /* unset */
    setenv("WATCHDOG_USEC", "", 1);
    assert_int_equal(sg_notify_watchdog_usec(), 0);
    setenv("WATCHDOG_USEC", "30000000", 1);
    assert_int_equal(sg_notify_watchdog_usec(), 30000000); /* no WATCHDOG_PID: ours */
    setenv("WATCHDOG_PID", pid, 1);
    assert_int_equal(sg_notify_watchdog_usec(), 30000000);
    setenv("WATCHDOG_PID", "", 1); /* empty: as unset */
    assert_int_equal(sg_notify_watchdog_usec(), 30000000);
    setenv("WATCHDOG_PID", other, 1); /* another process's */
    assert_int_equal(sg_notify_watchdog_usec(), 0);
    setenv("WATCHDOG_PID", "12x", 1);
    assert_int_equal(sg_notify_watchdog_usec(), 0);
    setenv("WATCHDOG_PID", pid, 1);
    setenv("WATCHDOG_USEC", "18446744073709551615", 1); /* the largest there is */
    assert_true(sg_notify_watchdog_usec() == UINT64_MAX);
    /* what strtoull would take but is no count of microseconds: refused */
    const char *bad[] = {"0", "10s", "-", "99999999999999999999999", " 5x", "-1", "+5", " 5", "18446744073709551616"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
        setenv("WATCHDOG_USEC", bad[i], 1);
        assert_int_equal(sg_notify_watchdog_usec(), 0);
    }
    unsetenv("WATCHDOG_USEC");
    assert_int_equal(sg_notify_watchdog_usec(), 0); /* the PID alone is nothing */
    unsetenv("WATCHDOG_PID");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_notify_path),   cmocka_unit_test(test_notify_unset),     cmocka_unit_test(test_notify_abstract),
        cmocka_unit_test(test_notify_errors), cmocka_unit_test(test_event_warns_once), cmocka_unit_test(test_reloading),
        cmocka_unit_test(test_watchdog),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
