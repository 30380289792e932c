/* The CPU backend's shared-memory transport (see cpu.h, shm.h): each rank writes into
 * its next rank's inbox, a ring in a segment both map, and reads its own; received data
 * is reduced or copied straight out of the inbox. A rank that finds nothing to do spins
 * a while (the peer usually answers within microseconds, and a sleep and its wake-up
 * cost tens), then sleeps on its doorbell, which a writer rings. The TCP connections
 * stay only to notice a neighbour that dies: the kernel closes them. */
#include "cpu.h"

#include "error.h"
#include "io.h"

#include <poll.h>
#include <sched.h>
#include <string.h>

#ifndef SHM_CHUNK
#define SHM_CHUNK ((size_t)128 << 10)
#endif
#define SHM_SPINS 200 /* tries without progress before sleeping on the doorbell, */
#ifndef SHM_SPIN_US
#define SHM_SPIN_US 50 /* and at least this long (not oversubscribed): a wake-up costs more */
#endif
#define SHM_NAP_MS 20 /* the longest sleep before looking at the peers' sockets */

static void shm_begin(cpu_t *c)
{
    ddp_shm_align(&c->next_seg, true);
    ddp_shm_align(&c->own, false);
}

static long shm_send_some(ddp_t *ddp, cpu_t *c, const char *what, const uint8_t *data, size_t len,
                          size_t unit)
{
    (void)ddp;
    (void)what;
    return (long)ddp_shm_write(&c->next_seg, data, len < SHM_CHUNK ? len : SHM_CHUNK, unit);
}

static long shm_recv_some(ddp_t *ddp, cpu_t *c, const char *what, uint8_t *direct, size_t want,
                          size_t unit, const uint8_t **data)
{
    (void)ddp;
    (void)what;
    (void)direct; /* the data is read out of the inbox by the caller */
    (void)unit;   /* writers write whole elements */
    size_t n;
    *data = ddp_shm_peek(&c->own, &n);
    return (long)(n < want ? n : want);
}

static void shm_consume(cpu_t *c, size_t n)
{
    ddp_shm_consume(&c->own, n, &c->prev_seg);
}

int ddp_cpu_shm_gone(const cpu_t *c, bool need_prev, bool need_next)
{
    struct pollfd fds[2] = {{.fd = need_prev ? c->prev_fd : -1, .events = POLLIN},
                            {.fd = need_next ? c->next_fd : -1, .events = POLLIN}};
    if (poll(fds, 2, 0) <= 0)
        return -1;
    return fds[0].revents ? c->prev : fds[1].revents ? c->next : -1;
}

/* After a sleep with nothing come: a neighbour gone, or the timeout. (A neighbour that
 * exits after its last write is not gone for us until that write is read: hence only
 * here.) */
static int check_after_sleep(ddp_t *ddp, cpu_t *c, const char *what, const cpu_progress_t *p)
{
    bool need_prev = ddp_cpu_needs_prev(p);
    int gone = ddp_cpu_shm_gone(c, need_prev, ddp_cpu_needs_next(p));
    if (gone >= 0)
        return ddp_fail_peer(ddp, DDP_ECLOSED, gone,
                             "%s: rank %d (%s) is gone: it closed the connection", what, gone,
                             ddp_cpu_addr(c, gone));
    if (ddp_clock_mono() < p->deadline)
        return 0;
    return ddp_cpu_no_progress(ddp, c, what, p, " over shared memory");
}

/* Whether the spinning goes on: SHM_SPINS tries, and at least SHM_SPIN_US; oversubscribed,
 * each try yields the CPU instead. */
bool ddp_cpu_shm_spin(const cpu_t *c, cpu_progress_t *p)
{
    if (++p->idle >= SHM_SPINS && !c->oversubscribed && !p->slept && SHM_SPIN_US > 0) {
        double clock = ddp_clock_mono();
        if (p->idle_since == 0)
            p->idle_since = clock;
        if (clock - p->idle_since < SHM_SPIN_US * 1e-6)
            p->idle = SHM_SPINS - 64; /* look at the clock every 64 tries */
    }
    if (p->idle >= SHM_SPINS)
        return false;
    if (c->oversubscribed)
        sched_yield();
    return true;
}

void ddp_cpu_shm_sleep(ddp_t *ddp, ddp_shm_bell_t *bell, uint32_t seen, bool ready, int peer,
                       cpu_progress_t *p)
{
    double now = ddp_clock_mono();
    if (p->deadline == 0)
        p->deadline = now + ddp->timeout;
    double left = p->deadline - now;
    ddp_flight_peer(ddp, peer);
    if (!ready && left > 0)
        ddp_shm_bell_wait(bell, seen,
                          left * 1000 < SHM_NAP_MS ? (int)(left * 1000) + 1 : SHM_NAP_MS);
    ddp_shm_bell_disarm(bell);
    p->idle = SHM_SPINS; /* after a sleep, try once and sleep again */
    p->slept = true;
}

static int shm_wait(ddp_t *ddp, cpu_t *c, const char *what, cpu_progress_t *p)
{
    if (p->slept) {
        p->slept = false;
        int err = check_after_sleep(ddp, c, what, p);
        if (err)
            return err;
    }
    if (ddp_cpu_shm_spin(c, p))
        return 0;
    /* Sleep until a neighbour rings, unless what we wait for came meanwhile. */
    ddp_shm_bell_t *door = ddp_shm_doorbell(&c->own);
    uint32_t seen = ddp_shm_bell_arm(door);
    size_t readable, es = ddp_dtype_size(p->t->dtype);
    ddp_shm_peek(&c->own, &readable);
    bool ready = (p->hs < p->hl && ddp_shm_room(&c->next_seg) >= 8) ||
                 (p->hs == p->hl && p->sent < p->sendable && ddp_shm_room(&c->next_seg) >= es) ||
                 (ddp_cpu_needs_prev(p) && readable > 0);
    /* The flight recorder's peer: the one whose data this rank still needs. */
    ddp_cpu_shm_sleep(ddp, door, seen, ready, ddp_cpu_needs_prev(p) ? c->prev : c->next, p);
    return 0;
}

const cpu_transport_t ddp_cpu_shm = {
    .name = "shm",
    .begin = shm_begin,
    .send_some = shm_send_some,
    .recv_some = shm_recv_some,
    .consume = shm_consume,
    .wait = shm_wait,
};
