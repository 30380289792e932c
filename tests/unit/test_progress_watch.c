/* Unit tests of the workers' progress as the agent looks at it (launcher/agent/progress_watch.c)
 * with --hang-timeout=auto: a rank whose progress ring shows no step for longer than 5x the
 * longest step (or the floor) begins the hang report that names it, and what auto has
 * learnt is written to <run dir>/hang_timeouts.json; a rank that steps is left alone. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "agent/hang_watch.h"
#include "agent/pause.h"
#include "agent/progress_watch.h"
#include "group_fixture.h"
#include "io.h"
#include "progress.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    group_fixture_t f;
    ddp_pause_t *pause;
    ddp_hang_watch_t *hang;
    ddp_progress_watch_t *progress;
} progress_fixture_t;

static void setup(progress_fixture_t *p, int nworkers)
{
    gf_init(&p->f, nworkers);
    p->f.cfg.hang_auto = true;
    p->f.cfg.hang_floor = 0.5;
    for (int i = 0; i < nworkers; i++)
        gf_start_worker(&p->f, i);
    assert_int_equal(ddp_pause_new(&p->f.g, &p->pause), 0);
    assert_int_equal(ddp_hang_watch_new(&p->f.g, p->pause, &p->hang), 0);
    assert_int_equal(ddp_progress_watch_new(&p->f.g, p->hang, p->pause, &p->progress), 0);
    ddp_hang_watch_attempt(p->hang);
}

static void teardown(progress_fixture_t *p)
{
    ddp_progress_watch_stop(p->progress);
    ddp_progress_watch_close(p->progress);
    ddp_hang_watch_close(p->hang);
    ddp_pause_close(p->pause);
    gf_free(&p->f);
    ddp_progress_watch_free(p->progress);
    ddp_hang_watch_free(p->hang);
    ddp_pause_free(p->pause);
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Worker i's progress ring: `steps` steps of at most 10 ms, the last `ago` s ago. */
static void write_ring(progress_fixture_t *p, int i, int64_t steps, double ago)
{
    ddp_progress_ring_t ring;
    memset(&ring, 0, sizeof ring);
    ring.magic = DDP_PROGRESS_MAGIC;
    ring.version = DDP_PROGRESS_VERSION;
    ring.pid = p->f.g.workers[i].pid;
    ring.steps = steps;
    ring.last_step_ns = now_ns() - (int64_t)(ago * 1e9);
    ring.longest_step_ns = 10 * 1000 * 1000;
    char dir[PATH_MAX], path[PATH_MAX + 32];
    gf_worker_dir(&p->f, i, dir, sizeof dir);
    snprintf(path, sizeof path, "%s/%s", dir, DDP_PROGRESS_FILE);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(ddp_write_all(fd, &ring, sizeof ring), 0);
    close(fd);
}

static bool stopped(const group_fixture_t *f)
{
    return f->stops > 0;
}

static void test_auto_names_the_rank_that_stopped(void **state)
{
    (void)state;
    progress_fixture_t p;
    setup(&p, 2);
    write_ring(&p, 0, 20, 0);
    write_ring(&p, 1, 20, 3);
    ddp_progress_watch_attempt(p.progress);
    assert_true(gf_run_until(&p.f, stopped, 10));
    assert_int_equal(p.f.stop_reason, DDP_STOP_FAILURE);
    assert_null(ddp_hang_watch_named(p.hang, 0));
    const char *named = ddp_hang_watch_named(p.hang, 1);
    assert_non_null(named);
    assert_non_null(strstr(named, "rank 1 has made no step for"));
    assert_non_null(strstr(named, "(--hang-timeout=auto: 0.5 s, --hang-timeout-floor; 5x the "
                                  "longest step would be 0.05 s)"));
    assert_false(ddp_progress_watch_take_straggler(p.progress));
    char path[PATH_MAX], *text = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "%s/hang_timeouts.json", p.f.g.run_dir);
    assert_int_equal(ddp_read_file(path, 4096, &text, &len), 0);
    assert_non_null(strstr(text, "\"step\": {\"longest_s\": 0.010, \"timeout_s\": 0.500}"));
    free(text);
    teardown(&p);
}

/* Ranks that step within their limit: no report. */
static void test_ranks_that_step_are_left_alone(void **state)
{
    (void)state;
    progress_fixture_t p;
    setup(&p, 1);
    p.f.cfg.hang_floor = 5;
    write_ring(&p, 0, 20, 0);
    ddp_progress_watch_attempt(p.progress);
    gf_run_for(&p.f, 0.5);
    assert_int_equal(p.f.stops, 0);
    assert_true(ddp_hang_watch_may_begin(p.hang));
    teardown(&p);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_auto_names_the_rank_that_stopped),
        cmocka_unit_test(test_ranks_that_step_are_left_alone),
    };
    if (argc > 1)
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
