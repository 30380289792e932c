/* Unit tests: stragglers' sums from progress and flight rings, the last arrivals, rows in
 * text and back, the median test and the report line. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "error.h"
#include "diagnose/straggler.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MS 1000000LL

/* A progress ring of `steps` steps of `step_ms`, `wait_ms` of each in collectives. */
static void progress_ring(ddp_progress_ring_t *r, int64_t steps, int64_t step_ms, int64_t wait_ms)
{
    memset(r, 0, sizeof *r);
    r->magic = DDP_PROGRESS_MAGIC;
    r->version = DDP_PROGRESS_VERSION;
    for (int64_t s = 1; s <= steps; s++) {
        ddp_progress_slot_t *slot = &r->slots[(s - 1) % DDP_PROGRESS_SLOTS];
        slot->step = s;
        slot->end_ns = s * step_ms * MS;
        slot->dur_ns = s == 1 ? 0 : step_ms * MS; /* the first step has no duration */
        slot->wait_ns = s == 1 ? 0 : wait_ms * MS;
    }
    r->steps = steps;
}

static void test_progress_sums(void **state)
{
    ddp_progress_ring_t r;
    ddp_straggler_acc_t acc = {0};
    progress_ring(&r, 10, 40, 10);
    ddp_straggler_take_progress(&acc, &r);
    assert_true(acc.steps);
    assert_int_equal((int)acc.units, 9);
    assert_true(acc.work_s > 0.269 && acc.work_s < 0.271); /* 9 x 30 ms */
    assert_true(acc.wait_s > 0.089 && acc.wait_s < 0.091);
    /* A second look takes in only what is new. */
    progress_ring(&r, 12, 40, 10);
    ddp_straggler_take_progress(&acc, &r);
    assert_int_equal((int)acc.units, 11);
    /* Past what the ring holds: the latest 64 only. */
    progress_ring(&r, 500, 40, 10);
    ddp_straggler_take_progress(&acc, &r);
    assert_int_equal((int)acc.units, 11 + DDP_PROGRESS_SLOTS);
    /* A torn slot (wait over the step) is left out. */
    ddp_straggler_window_reset(&acc);
    assert_int_equal((int)acc.units, 0);
    progress_ring(&r, 503, 40, 10);
    r.slots[(502 - 1) % DDP_PROGRESS_SLOTS].wait_ns = 90 * MS;
    ddp_straggler_take_progress(&acc, &r);
    assert_int_equal((int)acc.units, 2);
}

static void flight_ring(ddp_flight_ring_t *r, uint64_t n, int64_t late_ms)
{
    memset(r, 0, sizeof *r);
    for (uint64_t seq = 1; seq <= n; seq++) {
        ddp_flight_entry_t *e = &r->slots[(seq - 1) % DDP_FLIGHT_SLOTS];
        e->seq = seq;
        e->entered_ns = (int64_t)seq * 100 * MS + late_ms * MS; /* works until then */
        e->left_ns = (int64_t)seq * 100 * MS + 50 * MS;         /* all leave together */
    }
    r->completed = r->entered = n;
}

static void test_flight_sums_and_arrivals(void **state)
{
    ddp_flight_ring_t rings[3];
    ddp_straggler_acc_t accs[3] = {{0}};
    bool present[3] = {true, true, false};
    flight_ring(&rings[0], 10, 0);
    flight_ring(&rings[1], 10, 40); /* enters 40 ms later each time */
    for (int i = 0; i < 2; i++)
        ddp_straggler_take_flight(&accs[i], &rings[i]);
    assert_false(accs[0].steps);
    assert_int_equal((int)accs[0].units, 9);
    /* rank 0: leaves at +50, enters the next at +100: 50 ms of work; rank 1: 90 ms. */
    assert_true(accs[0].work_s > 0.449 && accs[0].work_s < 0.451);
    assert_true(accs[1].work_s > 0.809 && accs[1].work_s < 0.811);
    uint64_t common = 0;
    ddp_straggler_entry_t latest[DDP_STRAGGLER_ENTRIES] = {{0}};
    ddp_straggler_take_arrivals(accs, rings, present, 3, &common, latest);
    assert_int_equal((int)common, 10);
    assert_int_equal((int)latest[9].seq, 10); /* the node's last entry into #10: rank 1's */
    assert_int_equal(latest[9].rank, 1);
    assert_int_equal(accs[1].arrivals, 10);
    assert_int_equal(accs[1].collectives, 10);
    assert_int_equal(accs[0].arrivals, 0);
    assert_int_equal(accs[2].collectives, 0); /* no ring */
    /* Nothing new: nothing counted again; ties count for nobody. */
    ddp_straggler_take_arrivals(accs, rings, present, 3, &common, NULL);
    assert_int_equal(accs[1].collectives, 10);
    flight_ring(&rings[0], 12, 0);
    flight_ring(&rings[1], 12, 0);
    ddp_straggler_take_arrivals(accs, rings, present, 3, &common, NULL);
    assert_int_equal(accs[0].arrivals + accs[1].arrivals, 10);
    assert_int_equal(accs[0].collectives, 12);
}

static ddp_straggler_row_t row(int rank, double units, double work_s)
{
    ddp_straggler_row_t r = {.rank = rank,
                             .node = rank / 2,
                             .local_rank = rank % 2,
                             .steps = true,
                             .units = units,
                             .work_s = work_s};
    snprintf(r.host, sizeof r.host, "n%d", rank / 2);
    return r;
}

static void test_find(void **state)
{
    ddp_straggler_row_t rows[5] = {row(0, 100, 1.0), row(1, 100, 1.02), row(2, 100, 1.5),
                                   row(3, 100, 0.99), row(4, 2, 9.0)}; /* 4: too few units */
    size_t found[5];
    double ratio[5], median;
    assert_int_equal(ddp_straggler_find(rows, 5, 1.2, found, ratio, &median), 1);
    assert_int_equal((int)found[0], 2);
    assert_true(median > 0.0100 && median < 0.0102);
    assert_true(ratio[0] > 1.47 && ratio[0] < 1.49);
    /* Over the ratio but under 2 ms more: not a straggler. */
    ddp_straggler_row_t tiny[3] = {row(0, 100, 0.01), row(1, 100, 0.01), row(2, 100, 0.05)};
    assert_int_equal(ddp_straggler_find(tiny, 3, 1.2, found, ratio, &median), 0);
    /* Two equally slow of four: both. */
    ddp_straggler_row_t two[4] = {row(0, 100, 1.0), row(1, 100, 4.0), row(2, 100, 4.0),
                                  row(3, 100, 1.0)};
    assert_int_equal(ddp_straggler_find(two, 4, 1.2, found, ratio, &median), 2);
    assert_int_equal((int)found[0], 1);
    assert_int_equal((int)found[1], 2);
    /* One rank alone: nothing to compare with. */
    assert_int_equal(ddp_straggler_find(rows, 1, 1.2, found, ratio, &median), 0);
}

static void test_rows_text(void **state)
{
    ddp_straggler_row_t rows[2] = {row(0, 10, 0.5), row(7, 12, 0.25)};
    rows[1].steps = false;
    rows[1].arrivals = 3;
    rows[1].collectives = 12;
    snprintf(rows[1].host, sizeof rows[1].host, "gpu 04"); /* a blank: sent as _ */
    ddp_buf_t text = DDP_BUF_INIT;
    assert_int_equal(ddp_straggler_rows_format(rows, 2, &text), 0);
    ddp_straggler_row_t *back = NULL;
    size_t n = 0;
    assert_int_equal(ddp_straggler_rows_parse(ddp_buf_str(&text), &back, &n, NULL, NULL), 0);
    assert_int_equal((int)n, 2);
    assert_int_equal(back[1].rank, 7);
    assert_false(back[1].steps);
    assert_int_equal(back[1].arrivals, 3);
    assert_string_equal(back[1].host, "gpu_04");
    assert_true(back[0].work_s > 0.4999 && back[0].work_s < 0.5001);
    free(back);
    /* Malformed lines: the rows before them are kept. */
    const char *bad[] = {"0 0 0 s 1 1 1 0 0 h\nnot a row\n", "0 0 0 x 1 1 1 0 0 h\n",
                         "0 0 0 s 1 1 1 5 2 h\n", "0 0 0 s -1 1 1 0 0 h\n",
                         "0 0 0 s 1 1 1 0 0 h extra\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(ddp_straggler_rows_parse(bad[i], &back, &n, NULL, NULL), DDP_EPARSE);
        assert_int_equal((int)n, i == 0 ? 1 : 0);
        free(back);
    }
    ddp_buf_free(&text);
}

/* Three nodes' last entries: the rank that came last across them gets the arrivals; a
 * collective not every node has is not compared; entries travel as text with the rows. */
static void test_global_arrivals(void **state)
{
    ddp_straggler_row_t rows[3] = {row(4, 10, 1), row(0, 10, 1), row(2, 10, 1)};
    rows[0].arrivals = rows[0].collectives = 7; /* node-local counts: replaced */
    ddp_straggler_entry_t mine[] = {{5, 0, 100}, {6, 0, 200}, {7, 0, 300}};
    ddp_straggler_entry_t theirs[] = {
        {5, 2, 150}, {6, 2, 190}, {5, 4, 120}, {6, 4, 180}, {7, 4, 290}};
    ddp_buf_t text = DDP_BUF_INIT;
    assert_int_equal(ddp_straggler_rows_format(rows, 3, &text), 0);
    assert_int_equal(ddp_straggler_entries_format(mine, 3, &text), 0);
    assert_int_equal(ddp_straggler_entries_format(theirs, 5, &text), 0);
    ddp_straggler_row_t *back = NULL;
    ddp_straggler_entry_t *entries = NULL;
    size_t n = 0, ne = 0;
    assert_int_equal(ddp_straggler_rows_parse(ddp_buf_str(&text), &back, &n, &entries, &ne), 0);
    assert_int_equal((int)n, 3);
    assert_int_equal((int)ne, 8);
    ddp_straggler_global_arrivals(back, n, entries, ne);
    /* Sorted by rank now: #5 waited for rank 2 (150), #6 for rank 0 (200); #7: two nodes. */
    assert_int_equal(back[0].rank, 0);
    assert_int_equal(back[0].arrivals, 1);
    assert_int_equal(back[1].arrivals, 1);
    assert_int_equal(back[2].arrivals, 0);
    assert_int_equal(back[2].collectives, 2);
    free(back);
    free(entries);
    assert_int_equal(ddp_straggler_rows_parse("e 0 1 5\n", &back, &n, &entries, &ne), DDP_EPARSE);
    free(back);
    free(entries);
    ddp_buf_free(&text);
}

static void test_describe(void **state)
{
    ddp_straggler_row_t r = row(13, 100, 4.12);
    r.wait_s = 0.21;
    ddp_buf_t line = DDP_BUF_INIT;
    ddp_straggler_describe(&r, 1.42, 0.029, 300, &line);
    assert_string_equal(ddp_buf_str(&line),
                        "straggler: rank 13 (node 6 on n6, local rank 1) works 41.2 ms a step, "
                        "1.42x the median rank's 29.0 ms, over the last 300 s (and 2.1 ms a "
                        "step in collectives)");
    ddp_buf_clear(&line);
    r.steps = false;
    r.arrivals = 61;
    r.collectives = 100;
    ddp_straggler_describe(&r, 1.42, 0.029, 300, &line);
    assert_non_null(strstr(ddp_buf_str(&line), "works 41.2 ms between collectives"));
    assert_non_null(strstr(ddp_buf_str(&line), "the collectives waited for it 61% of"));
    ddp_buf_free(&line);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_progress_sums), cmocka_unit_test(test_flight_sums_and_arrivals),
        cmocka_unit_test(test_find),          cmocka_unit_test(test_rows_text),
        cmocka_unit_test(test_describe),      cmocka_unit_test(test_global_arrivals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
