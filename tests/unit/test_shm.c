/* Unit tests: the shared-memory ring of libddp's CPU backend (worker/shm.c), both ends
 * mapped in this process as two neighbours would map them. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "error.h"
#include "shm.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

typedef struct {
    ddp_shm_seg_t inbox, writer_view; /* one segment: the reader's and the writer's maps */
    char name[80];
} link_t;

static void open_link(link_t *l, size_t ring)
{
    uint64_t nonce[2];
    memset(l, 0, sizeof *l);
    assert_int_equal(ddp_shm_create(&l->inbox, "unit", ring, 0, l->name, sizeof l->name, nonce), 0);
    assert_int_equal(ddp_shm_open(&l->writer_view, l->name, nonce), 0);
    assert_int_equal(l->writer_view.size, ring);
}

static void close_link(link_t *l)
{
    ddp_shm_unlink(l->name);
    ddp_shm_close(&l->writer_view);
    ddp_shm_close(&l->inbox);
}

/* Reads everything readable (both pieces around the wrap) into `out`. */
static size_t drain(link_t *l, uint8_t *out, size_t cap)
{
    size_t total = 0, n;
    const uint8_t *p;
    while ((p = ddp_shm_peek(&l->inbox, &n)) != NULL && n > 0 && total < cap) {
        n = n < cap - total ? n : cap - total;
        memcpy(out + total, p, n);
        ddp_shm_consume(&l->inbox, n, &l->writer_view);
        total += n;
    }
    return total;
}

static void test_stream_wraps_and_keeps_order(void **state)
{
    link_t l;
    uint8_t data[200], got[200];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (uint8_t)(i * 7 + 1);
    open_link(&l, 64);
    size_t sent = 0, received = 0;
    /* Writes of 24 bytes in units of 8 into a 64-byte ring: it fills, wraps, refills. */
    while (received < sizeof data) {
        size_t want = sizeof data - sent < 24 ? sizeof data - sent : 24;
        sent += ddp_shm_write(&l.writer_view, data + sent, want, 8);
        assert_true(ddp_shm_room(&l.writer_view) <= 64);
        received += drain(&l, got + received, sizeof got - received);
    }
    assert_int_equal(sent, sizeof data);
    assert_memory_equal(got, data, sizeof data);
    close_link(&l);
}

static void test_room_limits_writes_to_whole_units(void **state)
{
    link_t l;
    uint8_t data[64] = {0}, out[64];
    open_link(&l, 64);
    assert_int_equal(ddp_shm_write(&l.writer_view, data, 60, 8), 56); /* whole units only */
    assert_int_equal(ddp_shm_room(&l.writer_view), 8);
    assert_int_equal(ddp_shm_write(&l.writer_view, data, 16, 8), 8);
    assert_int_equal(ddp_shm_write(&l.writer_view, data, 16, 8), 0); /* full */
    assert_int_equal(drain(&l, out, sizeof out), 64);
    assert_int_equal(ddp_shm_room(&l.writer_view), 64);
    close_link(&l);
}

/* Each side keeps the other's position as last read (a cross-core read saved per write
 * and per read): what the other publishes later is still seen once that view is used up,
 * and the writer reads the tail again rather than call a freed ring full. */
static void test_kept_positions_see_every_publication(void **state)
{
    link_t l;
    uint8_t a[8] = {1, 1, 1, 1, 1, 1, 1, 1}, b[8] = {2, 2, 2, 2, 2, 2, 2, 2}, fill[64] = {0};
    uint8_t out[64];
    size_t n;
    open_link(&l, 64);
    assert_int_equal(ddp_shm_write(&l.writer_view, a, 8, 8), 8);
    const uint8_t *p = ddp_shm_peek(&l.inbox, &n);
    assert_int_equal(n, 8);
    assert_int_equal(ddp_shm_write(&l.writer_view, b, 8, 8), 8); /* after the reader looked */
    ddp_shm_consume(&l.inbox, 8, &l.writer_view);
    p = ddp_shm_peek(&l.inbox, &n);
    assert_int_equal(n, 8);
    assert_memory_equal(p, b, 8);
    ddp_shm_consume(&l.inbox, 8, &l.writer_view);
    /* The writer fills the ring, the reader frees it all: a whole ring fits again. */
    assert_int_equal(ddp_shm_write(&l.writer_view, fill, 64, 8), 64);
    assert_int_equal(ddp_shm_write(&l.writer_view, fill, 8, 8), 0);
    assert_int_equal(drain(&l, out, sizeof out), 64);
    assert_int_equal(ddp_shm_write(&l.writer_view, fill, 64, 8), 64);
    close_link(&l);
}

/* Each transfer starts at a multiple of 8 on both sides; the reader may align before the
 * writer has, and must then see nothing rather than the gap. */
static void test_alignment_between_transfers(void **state)
{
    link_t l;
    uint8_t four[4] = {1, 2, 3, 4}, eight[8] = {9, 9, 9, 9, 9, 9, 9, 9}, out[16];
    size_t n;
    open_link(&l, 64);
    ddp_shm_align(&l.writer_view, true);
    ddp_shm_align(&l.inbox, false);
    assert_int_equal(ddp_shm_write(&l.writer_view, four, 4, 4), 4);
    assert_int_equal(drain(&l, out, 4), 4);
    ddp_shm_align(&l.inbox, false); /* the reader is first at the next transfer */
    ddp_shm_peek(&l.inbox, &n);
    assert_int_equal(n, 0);
    ddp_shm_align(&l.writer_view, true);
    assert_int_equal(ddp_shm_write(&l.writer_view, eight, 8, 8), 8);
    assert_int_equal(drain(&l, out, sizeof out), 8);
    assert_memory_equal(out, eight, 8);
    close_link(&l);
}

static void test_open_checks_the_nonce(void **state)
{
    ddp_shm_seg_t seg, other;
    char name[80];
    uint64_t nonce[2], wrong[2];
    assert_int_equal(ddp_shm_create(&seg, "unit", 64, 0, name, sizeof name, nonce), 0);
    wrong[0] = nonce[0] ^ 1;
    wrong[1] = nonce[1];
    assert_int_equal(ddp_shm_open(&other, name, wrong), DDP_EPROTO);
    assert_null(other.header);
    ddp_shm_unlink(name);
    assert_int_equal(ddp_shm_open(&other, name, nonce), -ENOENT);
    ddp_shm_close(&seg);
}

/* A look copies what is readable, across the ring's end, and uses none of it up; it says
 * no when fewer bytes than asked have come. */
static void test_look_leaves_the_bytes(void **state)
{
    link_t l;
    uint8_t fill[48] = {0}, data[32], out[48];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (uint8_t)(100 + i);
    open_link(&l, 64);
    assert_int_equal(ddp_shm_write(&l.writer_view, fill, 48, 8), 48);
    assert_int_equal(drain(&l, out, 48), 48);
    assert_false(ddp_shm_look(&l.inbox, out, 8));                     /* nothing yet */
    assert_int_equal(ddp_shm_write(&l.writer_view, data, 32, 8), 32); /* 16 to the end, 16 */
    assert_false(ddp_shm_look(&l.inbox, out, 40));
    memset(out, 0, sizeof out);
    assert_true(ddp_shm_look(&l.inbox, out, 32));
    assert_memory_equal(out, data, 32);
    assert_int_equal(drain(&l, out, 32), 32); /* still there to read */
    assert_memory_equal(out, data, 32);
    close_link(&l);
}

/* A segment with a board: it begins on a page of its own behind the ring, zeroed, and
 * what one map writes there another map of the segment reads; without one, none. */
static void test_board_behind_the_ring(void **state)
{
    ddp_shm_seg_t seg, other;
    char name[80];
    uint64_t nonce[2];
    assert_int_equal(ddp_shm_create(&seg, "unit", 64, 5000, name, sizeof name, nonce), 0);
    assert_int_equal(ddp_shm_open(&other, name, nonce), 0);
    assert_int_equal(other.board_size, 5000);
    assert_int_equal(other.size, 64);
    assert_true(seg.board >= seg.ring + seg.size);
    assert_int_equal((uintptr_t)seg.board % 4096, 0);
    assert_true(other.board + other.board_size <= (uint8_t *)other.header + other.mapped);
    for (size_t i = 0; i < 5000; i++)
        assert_int_equal(other.board[i], 0);
    memset(seg.board + 4990, 7, 10);
    assert_int_equal(other.board[4999], 7);
    ddp_shm_close(&other);
    ddp_shm_unlink(name);
    ddp_shm_close(&seg);
    link_t l;
    open_link(&l, 64);
    assert_null(l.writer_view.board);
    assert_int_equal(l.writer_view.board_size, 0);
    close_link(&l);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A sleeper wakes at its timeout when nobody rings, and at once when the bell moved
 * between arming and waiting. */
static void test_bell(void **state)
{
    link_t l;
    uint8_t byte[8] = {0};
    open_link(&l, 64);
    uint32_t seen = ddp_shm_bell_arm(ddp_shm_doorbell(&l.inbox));
    double t0 = now();
    ddp_shm_bell_wait(ddp_shm_doorbell(&l.inbox), seen, 30);
    assert_true(now() - t0 >= 0.02);
    ddp_shm_bell_disarm(ddp_shm_doorbell(&l.inbox));
    seen = ddp_shm_bell_arm(ddp_shm_doorbell(&l.inbox));
    ddp_shm_write(&l.writer_view, byte, 8, 8); /* rings the reader's bell */
    t0 = now();
    ddp_shm_bell_wait(ddp_shm_doorbell(&l.inbox), seen, 5000);
    assert_true(now() - t0 < 1.0);
    ddp_shm_bell_disarm(ddp_shm_doorbell(&l.inbox));
    close_link(&l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_wraps_and_keeps_order),
        cmocka_unit_test(test_room_limits_writes_to_whole_units),
        cmocka_unit_test(test_alignment_between_transfers),
        cmocka_unit_test(test_kept_positions_see_every_publication),
        cmocka_unit_test(test_open_checks_the_nonce),
        cmocka_unit_test(test_look_leaves_the_bytes),
        cmocka_unit_test(test_board_behind_the_ring),
        cmocka_unit_test(test_bell),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
