/* A worker group for the unit tests of the agent's parts (launcher/agent/group.h): a real
 * loop, a log into a file, a run and an attempt directory, workers that are real child
 * processes where a test wants them, and an ops table that records what a part asked of
 * the agent instead of doing it. Everything a fixture makes, gf_free ends or removes. */
#ifndef DDP_TESTS_GROUP_FIXTURE_H
#define DDP_TESTS_GROUP_FIXTURE_H

#include "agent/group.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    ddp_group_t g;
    ddp_launch_config_t cfg; /* ddp_config_defaults; a test sets what it needs first */
    ddp_log_t log;
    uv_loop_t loop;
    ddp_guard_t guard; /* none: pid 0, fd -1 */
    ddp_output_t output;
    char dir[64];       /* the run directory; the attempt's is <dir>/attempt_0 */
    char log_path[128]; /* where the log goes */
    int stderr_fd;      /* the test's own stderr while gf_capture_stderr holds it; -1 */
    /* What the parts asked of the agent. */
    int stops, fail_rounds, finished, leftovers_done, progress_read, rendezvous_started;
    int ended; /* ops->end_job's status; -1 until asked */
    bool left; /* ended by ops->leave_job (a job that goes on elsewhere) */
    int stop_signal;
    ddp_stop_reason_t stop_reason;
    size_t first_failure;
} group_fixture_t;

/* A group of `nworkers` (not started: pid 0) in attempt 0 of a one-node job, state
 * RUNNING. */
void gf_init(group_fixture_t *f, int nworkers);
/* Worker i runs: a child that sleeps (at most 30 s), its own process group leader. */
void gf_start_worker(group_fixture_t *f, int i);
/* Worker i as `pid` (the test's own child), running. */
void gf_adopt_worker(group_fixture_t *f, int i, pid_t pid);
/* Runs the loop for `seconds`. */
void gf_run_for(group_fixture_t *f, double seconds);
/* Runs the loop until `done(f)` or `seconds` have passed; whether done. */
bool gf_run_until(group_fixture_t *f, bool (*done)(const group_fixture_t *f), double seconds);
/* What the launcher writes to stderr itself (a report's table) goes to the log until
 * released (an assertion's message in between would go there too: release first). */
void gf_capture_stderr(group_fixture_t *f);
void gf_release_stderr(group_fixture_t *f);
/* What was logged so far (and captured from stderr), NUL-terminated; the caller frees. */
char *gf_log(const group_fixture_t *f);
/* Worker i's directory, <attempt dir>/<i>, into buf[cap]. */
void gf_worker_dir(const group_fixture_t *f, int i, char *buf, size_t cap);
/* Ends the workers still running (SIGKILL to their groups, reaped), runs the loop until the
 * parts' handles (closed by the caller first) are gone, removes the directories. */
void gf_free(group_fixture_t *f);

#endif
