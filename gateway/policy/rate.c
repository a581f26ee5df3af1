/*
 * rate.c -- the client's rate limit as one step of a request (rate.h): local GCRA or the shared
 * one in Redis, then go on, wait on the loop's timer heap, or refuse.
 */
#include "rate.h"
#include "ratelimit_global.h"

#include <stdio.h>

static void on_wait_over(sg_timer_t *t)
{
    sg_rate_t *r = H2O_STRUCT_FROM_MEMBER(sg_rate_t, timer, t);
    r->next->admitted(r->ctx, 1);
}

/* Acts on a decision: SG_RL_ALLOW goes on at once. */
static void decide(sg_rate_t *r, int rl, uint64_t wait_us)
{
    sg_client_t *client = r->client;
    if (rl == SG_RL_DENY) {
        uint32_t retry;
        char msg[240];
        int status = sg_clients_rate_refusal(client, wait_us, r->max_wait_us, &retry, msg, sizeof(msg));
        r->next->refused(r->ctx, status, "rate_limited", msg, retry);
        return;
    }
    if (rl == SG_RL_WAIT) {
        sg_counter_add(client->m_queued, 1);
        sg_hist_observe_us(client->m_wait, wait_us);
        sg_timer_start(&r->loop->timers, &r->timer, sg_now_ms() + (wait_us + 999) / 1000, on_wait_over);
        return;
    }
    r->next->admitted(r->ctx, 0);
}

/* Redis decided on the shared rate limit (or, when it could not, the replica's fallback bucket). */
static void on_global_decision(void *arg, int decision, uint64_t wait_us)
{
    sg_rate_t *r = arg;
    const sg_rate_next_t *next = r->next;
    void *ctx = r->ctx;
    if (!next->gone(ctx))
        decide(r, decision, wait_us);
    next->release(ctx); /* the round trip's hold: `r` may be gone now */
}

void sg_rate_charge(sg_rate_t *r, sg_loop_t *loop, sg_clients_t *table, sg_client_t *client, uint32_t n, uint64_t start_us,
                    uint64_t deadline_us, const sg_rate_next_t *next, void *ctx)
{
    const sg_client_conf_t *cc = client->conf;
    uint64_t max_wait_us = cc->mode == SG_RL_QUEUE ? (uint64_t)cc->max_wait_ms * 1000 : 0;
    if (max_wait_us > deadline_us - start_us)
        max_wait_us = deadline_us - start_us;
    r->next = next;
    r->ctx = ctx;
    r->loop = loop;
    r->client = client;
    r->max_wait_us = max_wait_us;
    uint64_t wait_us = 0;
    int rl;
    if (cc->rate > 0 && cc->global) {
        next->hold(ctx); /* the Redis round trip's */
        if (sg_ratelimit_global(loop->redis, table, client, n, max_wait_us, on_global_decision, r, &rl, &wait_us) != 0)
            return; /* Redis decides (or, when it cannot answer, the replica's fallback bucket) */
        next->release(ctx);
    } else {
        rl = sg_clients_ratelimit(table, client, n, start_us, max_wait_us, &wait_us);
    }
    decide(r, rl, wait_us);
}

void sg_rate_stop(sg_rate_t *r)
{
    if (r->loop != NULL)
        sg_timer_stop(&r->loop->timers, &r->timer);
}
