/*
 * notify.h -- the systemd readiness protocol (sd_notify), written by hand: a datagram of
 * "KEY=value" lines to the Unix socket named by $NOTIFY_SOCKET. libsystemd is not needed, and
 * without $NOTIFY_SOCKET (not run by systemd, or not Type=notify) every call does nothing.
 *
 * The gateway sends READY=1 once every listener accepts and the address files are written,
 * RELOADING=1 when a configuration reload begins and READY=1 again when it is over (applied or
 * refused: the gateway serves either way; systemd's reload protocol), STOPPING=1 when a shutdown
 * begins, and WATCHDOG=1 every half of $WATCHDOG_USEC while every loop thread keeps going round
 * (a wedged loop stops the pings, and systemd restarts the unit).
 */
#ifndef SG_GATEWAY_NOTIFY_H
#define SG_GATEWAY_NOTIFY_H

#include <stddef.h>
#include <stdint.h>

/**
 * Sends `state` ("READY=1\nSTATUS=...") to $NOTIFY_SOCKET. Returns 1 when sent, 0 when
 * $NOTIFY_SOCKET is unset, -1 with a message in `err` when it could not be sent. Any thread.
 */
int sg_notify(const char *state, char *err, size_t err_size);
/** sg_notify(), with a failure logged (once per process, never fatal). Any thread. */
void sg_notify_event(const char *state);
/** RELOADING=1 with the STATUS and the MONOTONIC_USEC that systemd's reload protocol wants. Any thread. */
void sg_notify_reloading(void);
/**
 * The watchdog interval systemd asks for ($WATCHDOG_USEC, when $WATCHDOG_PID is unset or this
 * process), in microseconds; 0 when there is none.
 */
uint64_t sg_notify_watchdog_usec(void);

#endif
