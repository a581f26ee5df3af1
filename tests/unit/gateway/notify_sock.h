/*
 * notify_sock.h -- systemd's end of the readiness protocol, for the tests of what the gateway
 * sends it (core/notify.c): a Unix datagram socket bound at a path or, for "@name", in the
 * abstract namespace, and the next datagram it receives. Header-only (static functions).
 */
#ifndef SG_TEST_NOTIFY_SOCK_H
#define SG_TEST_NOTIFY_SOCK_H

#include <poll.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include <unistd.h>

/* Binds a datagram socket at `name` (a path, or "@name": the abstract namespace, the way
 * $NOTIFY_SOCKET spells it); the descriptor, or -1. */
static inline int notify_sock_bind(const char *name)
{
    struct sockaddr_un sun;
    memset(&sun, 0, sizeof(sun));
    sun.sun_family = AF_UNIX;
    size_t n = strlen(name);
    if (n >= sizeof(sun.sun_path))
        return -1;
    memcpy(sun.sun_path, name, n);
    socklen_t len = (socklen_t)sizeof(sun);
    if (name[0] == '@') {
        sun.sun_path[0] = '\0';
        len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
    }
    int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
    if (fd >= 0 && bind(fd, (struct sockaddr *)&sun, len) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* The next datagram on `fd`, NUL-terminated in out[size], within `timeout_ms`: its length, or -1
 * when none came. */
static inline ssize_t notify_sock_next(int fd, char *out, size_t size, int timeout_ms)
{
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) != 1)
        return -1;
    ssize_t n = recv(fd, out, size - 1, 0);
    if (n >= 0)
        out[n] = '\0';
    return n;
}

#endif
