/*
 * notify.c -- sd_notify without libsystemd (notify.h). The protocol is one datagram per message
 * on an AF_UNIX socket: $NOTIFY_SOCKET is a path, or "@name" for the abstract namespace (the
 * '@' becomes a NUL byte). systemd checks the sender's credentials itself (NotifyAccess=main
 * accepts any thread of the main process).
 */
#include "notify.h"
#include "common.h"

#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

int sg_notify(const char *state, char *err, size_t err_size)
{
    const char *path = getenv("NOTIFY_SOCKET");
    if (path == NULL || path[0] == '\0')
        return 0;
    struct sockaddr_un sun;
    memset(&sun, 0, sizeof(sun));
    sun.sun_family = AF_UNIX;
    size_t n = strlen(path);
    if ((path[0] != '/' && path[0] != '@') || n >= sizeof(sun.sun_path)) {
        snprintf(err, err_size, "NOTIFY_SOCKET=%.120s: expected an absolute path or @name", path);
        return -1;
    }
    memcpy(sun.sun_path, path, n);
    if (path[0] == '@')
        sun.sun_path[0] = '\0';
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (path[0] == '/' ? 1 : 0));
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, err_size, "NOTIFY_SOCKET: socket: %s", strerror(errno));
        return -1;
    }
    ssize_t w = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (const struct sockaddr *)&sun, len);
    int e = errno;
    close(fd);
    if (w < 0) {
        snprintf(err, err_size, "NOTIFY_SOCKET=%.120s: %s", path, strerror(e));
        return -1;
    }
    return 1;
}

void sg_notify_event(const char *state)
{
    static atomic_int warned;
    char err[256];
    if (sg_notify(state, err, sizeof(err)) < 0 && atomic_exchange(&warned, 1) == 0)
        SG_LOG(SG_LL_WARN, "main", "sd_notify: %s", err);
}

void sg_notify_reloading(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    char state[128];
    /* MONOTONIC_USEC: systemd 253's Type=notify-reload matches the message to the reload it asked
     * for; older managers (Debian 12's 252) ignore the field */
    snprintf(state, sizeof(state), "RELOADING=1\nSTATUS=reloading the configuration\nMONOTONIC_USEC=%llu",
             (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000ULL);
    sg_notify_event(state);
}

uint64_t sg_notify_watchdog_usec(void)
{
    const char *us = getenv("WATCHDOG_USEC"), *pid = getenv("WATCHDOG_PID");
    if (us == NULL || us[0] == '\0')
        return 0;
    char *end;
    if (pid != NULL && pid[0] != '\0') {
        long p = strtol(pid, &end, 10);
        if (*end != '\0' || p != (long)getpid())
            return 0; /* meant for another process (e.g. a parent that exec'ed us without clearing it) */
    }
    if (us[0] < '0' || us[0] > '9')
        return 0; /* strtoull would take " 5", "+5" and "-1" (as 2^64 - 1) */
    errno = 0;
    unsigned long long v = strtoull(us, &end, 10);
    if (errno != 0 || *end != '\0' || v == 0)
        return 0;
    return (uint64_t)v;
}
