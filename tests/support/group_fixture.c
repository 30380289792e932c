/* The agent parts' test group (group_fixture.h). */
#include "group_fixture.h"

#include "io.h"
#include "host/proc.h"

#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

static group_fixture_t *fixture_of(ddp_group_t *g)
{
    return (group_fixture_t *)(void *)((char *)g - offsetof(group_fixture_t, g));
}

static void op_stop(ddp_group_t *g, int sig, ddp_stop_reason_t reason)
{
    group_fixture_t *f = fixture_of(g);
    f->stops++;
    f->stop_signal = sig;
    f->stop_reason = reason;
    g->stop_reason = reason;
}

static void op_fail_round(ddp_group_t *g, size_t first)
{
    group_fixture_t *f = fixture_of(g);
    f->fail_rounds++;
    f->first_failure = first;
    g->stop_reason = DDP_STOP_FAILURE;
}

static void op_group_ended(ddp_group_t *g)
{
    fixture_of(g)->finished++;
}

static void op_leftovers_done(ddp_group_t *g)
{
    fixture_of(g)->leftovers_done++;
}

static void op_progress_read(ddp_group_t *g)
{
    fixture_of(g)->progress_read++;
}

static void op_start_rendezvous(ddp_group_t *g)
{
    fixture_of(g)->rendezvous_started++;
}

static void op_end_job(ddp_group_t *g, int exit_code)
{
    fixture_of(g)->ended = exit_code;
}

static void op_leave_job(ddp_group_t *g, int exit_code)
{
    fixture_of(g)->ended = exit_code;
    fixture_of(g)->left = true;
}

static const ddp_agent_ops_t recording_ops = {
    .stop = op_stop,
    .fail_round = op_fail_round,
    .group_ended = op_group_ended,
    .leftovers_done = op_leftovers_done,
    .progress_read = op_progress_read,
    .start_rendezvous = op_start_rendezvous,
    .end_job = op_end_job,
    .leave_job = op_leave_job,
};

void gf_init(group_fixture_t *f, int nworkers)
{
    memset(f, 0, sizeof *f);
    f->ended = -1;
    ddp_config_defaults(&f->cfg);
    f->cfg.nproc_per_node = nworkers;
    snprintf(f->dir, sizeof f->dir, "/tmp/ddp-parts-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->log_path, sizeof f->log_path, "%s/log", f->dir);
    ddp_log_init(&f->log, "ddp-launch", DDP_LOG_DEBUG);
    f->log.fd = open(f->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    assert_true(f->log.fd >= 0);
    f->stderr_fd = -1;
    assert_int_equal(uv_loop_init(&f->loop), 0);
    f->guard.fd = -1;
    ddp_output_init(&f->output, &f->loop, &f->log, false);
    ddp_group_t *g = &f->g;
    g->cfg = &f->cfg;
    g->log = &f->log;
    g->loop = &f->loop;
    g->ops = &recording_ops;
    g->events.fd = -1;
    snprintf(g->host, sizeof g->host, "testhost");
    g->guard = &f->guard;
    g->output = &f->output;
    g->dump_signal = SIGRTMIN + 6;
    g->nworkers = nworkers;
    g->world_size = nworkers;
    g->nnodes = 1;
    g->workers = calloc((size_t)nworkers, sizeof *g->workers);
    g->failures = calloc((size_t)nworkers + 1, sizeof *g->failures);
    assert_non_null(g->workers);
    assert_non_null(g->failures);
    assert_true(asprintf(&g->run_dir, "%s", f->dir) > 0);
    assert_true(asprintf(&g->attempt_dir, "%s/attempt_0", f->dir) > 0);
    assert_int_equal(mkdir(g->attempt_dir, 0700), 0);
    for (int i = 0; i < nworkers; i++) {
        char dir[PATH_MAX];
        g->workers[i].local_rank = g->workers[i].rank = i;
        gf_worker_dir(f, i, dir, sizeof dir);
        assert_int_equal(mkdir(dir, 0700), 0);
    }
    g->state = DDP_AGENT_RUNNING;
    g->first_succeeded = g->first_succeeded_wall = -1;
    g->attempt_began = ddp_clock_wall();
}

void gf_adopt_worker(group_fixture_t *f, int i, pid_t pid)
{
    f->g.workers[i].pid = pid;
    f->g.workers[i].running = true;
    f->g.nrunning++;
}

void gf_start_worker(group_fixture_t *f, int i)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setpgid(0, 0);
        for (int k = 0; k < 300; k++) /* at most 30 s */
            usleep(100 * 1000);
        _exit(0);
    }
    setpgid(pid, pid); /* (both sides: either may run first) */
    gf_adopt_worker(f, i, pid);
}

static void on_stop(uv_timer_t *handle)
{
    uv_stop(handle->loop);
}

void gf_run_for(group_fixture_t *f, double seconds)
{
    uv_timer_t stop;
    uv_timer_init(&f->loop, &stop);
    uv_timer_start(&stop, on_stop, (uint64_t)(seconds * 1000), 0);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    uv_close((uv_handle_t *)&stop, NULL);
    uv_run(&f->loop, UV_RUN_NOWAIT); /* the close completes while `stop` exists */
}

bool gf_run_until(group_fixture_t *f, bool (*done)(const group_fixture_t *f), double seconds)
{
    double deadline = ddp_clock_mono() + seconds;
    while (!done(f) && ddp_clock_mono() < deadline)
        gf_run_for(f, 0.05);
    return done(f);
}

void gf_capture_stderr(group_fixture_t *f)
{
    if (f->stderr_fd >= 0)
        return;
    f->stderr_fd = dup(2);
    assert_true(f->stderr_fd >= 0);
    assert_int_equal(dup2(f->log.fd, 2), 2);
}

void gf_release_stderr(group_fixture_t *f)
{
    if (f->stderr_fd < 0)
        return;
    dup2(f->stderr_fd, 2);
    close(f->stderr_fd);
    f->stderr_fd = -1;
}

char *gf_log(const group_fixture_t *f)
{
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(ddp_read_file(f->log_path, 1 << 22, &text, &len), 0);
    return text;
}

void gf_worker_dir(const group_fixture_t *f, int i, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/%d", f->g.attempt_dir, i);
}

void gf_free(group_fixture_t *f)
{
    ddp_group_t *g = &f->g;
    for (int i = 0; i < g->nworkers; i++) {
        if (g->workers[i].pid <= 0)
            continue;
        (void)ddp_proc_signal_group(g->workers[i].pid, SIGCONT);
        (void)ddp_proc_signal_group(g->workers[i].pid, SIGKILL);
        (void)waitpid(g->workers[i].pid, NULL, 0);
    }
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    for (size_t i = 0; i < g->nfailures; i++)
        ddp_failure_free(&g->failures[i]);
    free(g->failures);
    free(g->workers);
    free(g->run_dir);
    free(g->attempt_dir);
    gf_release_stderr(f);
    close(f->log.fd);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
    assert_int_equal(system(cmd), 0);
    ddp_config_free(&f->cfg);
}
