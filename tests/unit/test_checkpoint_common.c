/* agent/checkpoint_common.c's records, pure: a node's record formatted and parsed back; what
 * a peer could write instead (each refused, the ranks it would have said left alone); the
 * newest step every rank holds. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "agent/checkpoint_common.h"
#include "error.h"

#include <string.h>

#define WORLD 6

static void unsaid(ddp_ckpt_rank_steps_t *held, int n)
{
    for (int i = 0; i < n; i++)
        held[i] = (ddp_ckpt_rank_steps_t){.n = -1};
}

static ddp_replica_peer_t peer;
static ddp_replica_step_t reps[2 * WORLD];
static size_t nreps;

static int parse(const char *text, ddp_ckpt_rank_steps_t *held)
{
    ddp_buf_t why = DDP_BUF_INIT;
    peer = (ddp_replica_peer_t){"untouched", 1, "", 0};
    nreps = 99;
    int err =
        ddp_checkpoint_common_parse(text, strlen(text), WORLD, held, &peer, reps, &nreps, &why);
    assert_true((err == 0) == (why.len == 0));
    ddp_buf_free(&why);
    return err;
}

/* Two nodes' records, formatted and parsed into one world: the step every rank holds. */
static void test_round_trip_and_step(void **state)
{
    (void)state;
    ddp_ckpt_rank_steps_t mine[3] = {{2, {7, 8}}, {2, {8, 7}}, {1, {7}}};
    ddp_ckpt_rank_steps_t theirs[3] = {{2, {6, 7}}, {2, {7, 8}}, {0, {0}}};
    ddp_ckpt_rank_steps_t held[WORLD];
    ddp_buf_t text = DDP_BUF_INIT;
    unsaid(held, WORLD);
    ddp_replica_peer_t self = {"10.1.2.3", 40000, "0123456789abcdef0123456789abcdef", 0},
                       none = {"", 0, "", 0};
    /* Node 1 holds rank 5's replicas of steps 7 and 6 (node 2's, say, lost). */
    ddp_replica_step_t held_here[2] = {{-1, 5, 7}, {-1, 5, 6}};
    assert_int_equal(ddp_checkpoint_common_format(&self, 0, 3, mine, NULL, 0, &text), 0);
    assert_string_equal(
        ddp_buf_str(&text),
        "ckpt1 10.1.2.3 40000 0123456789abcdef0123456789abcdef 0 3 2 7 8 2 8 7 1 7 0");
    assert_int_equal(parse(ddp_buf_str(&text), held), 0);
    assert_string_equal(peer.host, "10.1.2.3");
    assert_int_equal(peer.port, 40000);
    assert_string_equal(peer.key, self.key);
    assert_int_equal(peer.rate, 0);                                         /* (none said) */
    assert_int_equal(ddp_checkpoint_common_step(held, WORLD, NULL, 0), -1); /* ranks 3-5 unsaid */
    /* Its --checkpoint-replica-rate, where it says one, last; one out of range refused. */
    self.rate = 1u << 20;
    ddp_buf_clear(&text);
    assert_int_equal(ddp_checkpoint_common_format(&self, 0, 3, mine, NULL, 0, &text), 0);
    assert_string_equal(
        ddp_buf_str(&text),
        "ckpt1 10.1.2.3 40000 0123456789abcdef0123456789abcdef 0 3 2 7 8 2 8 7 1 7 0 1048576");
    unsaid(held, WORLD);
    assert_int_equal(parse(ddp_buf_str(&text), held), 0);
    assert_int_equal(peer.rate, 1u << 20);
    unsaid(held, WORLD);
    assert_int_equal(
        parse("ckpt1 10.1.2.3 40000 0123456789abcdef0123456789abcdef 0 3 2 7 8 2 8 7 1 7 0 1",
              held),
        DDP_EPARSE);
    unsaid(held, WORLD);
    assert_int_equal(
        parse("ckpt1 10.1.2.3 40000 0123456789abcdef0123456789abcdef 0 3 2 7 8 2 8 7 1 7 0", held),
        0);
    ddp_buf_clear(&text);
    assert_int_equal(ddp_checkpoint_common_format(&none, 3, 3, theirs, held_here, 2, &text), 0);
    assert_string_equal(ddp_buf_str(&text), "ckpt1 - 0 - 3 3 2 6 7 2 7 8 0 2 5 7 5 6");
    assert_int_equal(parse(ddp_buf_str(&text), held), 0);
    assert_string_equal(peer.host, "");
    assert_int_equal(peer.port, 0);
    assert_string_equal(peer.key, "");
    assert_int_equal(held[4].n, 2);
    assert_int_equal(held[4].step[1], 8);
    assert_int_equal(nreps, 2);
    assert_int_equal(reps[1].rank, 5);
    assert_int_equal(reps[1].step, 6);
    assert_int_equal(ddp_checkpoint_common_step(held, WORLD, NULL, 0), -1); /* rank 5 holds none */
    assert_int_equal(ddp_checkpoint_common_step(held, WORLD, reps, nreps), 7); /* a replica does */
    reps[0].step = 9;
    assert_int_equal(ddp_checkpoint_common_step(held, WORLD, reps, nreps), -1);
    held[5] = (ddp_ckpt_rank_steps_t){1, {7}};
    assert_int_equal(ddp_checkpoint_common_step(held, WORLD, NULL, 0), 7);
    held[2] = (ddp_ckpt_rank_steps_t){2, {8, 7}};
    held[3] = (ddp_ckpt_rank_steps_t){2, {8, 7}};
    held[5] = (ddp_ckpt_rank_steps_t){2, {7, 8}};
    assert_int_equal(ddp_checkpoint_common_step(held, WORLD, NULL, 0), 8);
    ddp_buf_free(&text);
}

/* What a peer could write instead of a record: each refused, nothing it says kept. */
static void test_bad_records_refused(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "", "ckpt2 - 0 0 1 0", "ckpt1 - 0 -", "ckpt1 - 0 - 0", "ckpt1 - 0 - 0 1",
        "ckpt1 - 0 - 0 1 1", "ckpt1 - 0 - 0 1 1 x",
        "ckpt1 - 0 - 0 1 5 1 2 3 4 5",            /* more steps than a rank may list */
        "ckpt1 - 0 - 0 1 1 -3",                   /* steps are not negative */
        "ckpt1 - 0 - 0 1 1 4611686018427387905",  /* beyond DDP_CKPT_MAX_STEP */
        "ckpt1 - 0 - 0 1 1 99999999999999999999", /* 20 digits */
        "ckpt1 - 0 - 5 2 0 0",                    /* ranks beyond the world */
        "ckpt1 - 0 - 9 0", "ckpt1 - 0 - 0 7", "ckpt1 - 0 - 0 1 0 ", "ckpt1 - 0 - 0 1 0 0 0",
        "ckpt1 - 0 - 0 1 1 3\n", "ckpt1 - 0 -  0 1 0", "ckpt1 - 0 - +0 1 0", "ckpt1 - 0 - 0 2 1 3",
        "ckpt1", "ckpt1 10.0.0.1", "ckpt1 10.0.0.1 65536 0 1 0", /* a port beyond 65535 */
        /* 19 digits, beyond int64_t: refused, never wrapped into range */
        "ckpt1 10.0.0.1 9999999999999999999 0123456789abcdef0123456789abcdef 0 1 0",
        "ckpt1 - 0 - 0 1 1 9999999999999999999", "ckpt1 - 0 - 0 1 0 1 0 9999999999999999999",
        "ckpt1 - 0 - 9999999999999999999 1 0",
        "ckpt1 10.0.0.1/8 1 0 1 0", /* a host of other characters */
        "ckpt1 a;b 1 0 1 0",
        "ckpt1 0123456789012345678901234567890123456789012345678901234567890123 1 0 1 0 0",
        "ckpt1 - 0 - 0 1 0 1 6 3", /* a replica of a rank beyond the world */
        "ckpt1 - 0 - 0 1 0 13 0 1 0 1 0 1 0 1 0 1 0 1 0 1 0 1 0 1 0 1 0 1 0 1 0 1 0 1 0 1 0 1",
        "ckpt1 - 0 - 0 1 0 2 1 3", /* fewer replicas than said */
        "ckpt1 - 0 - 0 1 0 1 1 3 4",
        "ckpt1 10.0.0.1 5 0123456789abcdef 0 1 0 0", /* a key of other than 128 bits */
        "ckpt1 10.0.0.1 5 0123456789ABCDEF0123456789ABCDEF 0 1 0 0",
        "ckpt1 10.0.0.1 5 0123456789abcdef0123456789abcdef0 0 1 0 0",
        "ckpt1 10.0.0.1 5 0 1 0 0", /* no key */
    };
    ddp_ckpt_rank_steps_t held[WORLD];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        unsaid(held, WORLD);
        if (parse(bad[i], held) != DDP_EPARSE)
            fail_msg("'%s' was taken", bad[i]);
        for (int r = 0; r < WORLD; r++)
            assert_int_equal(held[r].n, -1);
        assert_string_equal(peer.host, "untouched");
        assert_int_equal(nreps, 99);
    }
    /* A rank said twice (by two nodes' records): the second refused. */
    unsaid(held, WORLD);
    assert_int_equal(parse("ckpt1 ::1 5 0123456789abcdef0123456789abcdef 0 2 1 3 0 0", held), 0);
    assert_string_equal(peer.host, "::1");
    assert_int_equal(parse("ckpt1 - 0 - 1 1 1 4 0", held), DDP_EPARSE);
    assert_string_equal(peer.host, "untouched");
    assert_int_equal(held[1].n, 0);
    /* Not NUL-terminated: only len bytes are read. */
    unsaid(held, WORLD);
    ddp_buf_t why = DDP_BUF_INIT;
    assert_int_equal(ddp_checkpoint_common_parse("ckpt1 - 0 - 0 1 1 3 0999", 21, WORLD, held, &peer,
                                                 reps, &nreps, &why),
                     0);
    assert_int_equal(held[0].step[0], 3);
    ddp_buf_free(&why);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_and_step),
        cmocka_unit_test(test_bad_records_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
