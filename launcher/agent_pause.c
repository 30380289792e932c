/* The terminal's signals on the agent's side. Ctrl-Z (see agent_internal.h): each worker
 * runs in its own session, so the terminal's SIGTSTP reaches only ddp-launch, which would
 * stand still while its workers went on (torchrun's workers of torch 2.x too). The workers
 * stop with it and go on when it does (fg, bg, SIGCONT). They get SIGSTOP: a session of its
 * own is an orphaned process group, where the kernel discards SIGTSTP. A resize (SIGWINCH)
 * is passed on. Runs on the loop thread. */
#include "agent_internal.h"

#include "io.h"
#include "spawn.h"

#include <signal.h>
#include <unistd.h>

/* Stops (SIGSTOP) the running workers not already stopped (SIGSTOP, a debugger, or a
 * pause of ours): those are marked paused, to be continued later. The count of paused
 * workers. */
static int stop_workers(ddp_agent_t *a)
{
    int n = 0;
    for (int i = 0; i < a->nworkers; i++) {
        ddp_worker_t *w = &a->workers[i];
        if (!w->paused)
            w->paused = w->running && !ddp_proc_stopped(w->pid) &&
                        ddp_agent_signal_worker(a, i, SIGSTOP) == 0;
        n += w->paused;
    }
    a->paused = true;
    a->paused_at = ddp_clock_mono();
    ddp_file_timer_hold(a->file_timer, true);
    return n;
}

/* Continues the workers stop_workers() stopped. The time stopped is no worker's hang
 * (quiet time counts from now: agent_hang.c, agent_progress.c), nor on its watchdog
 * timers. */
static void continue_workers(ddp_agent_t *a)
{
    if (!a->paused)
        return; /* (continued already: the timers were postponed then) */
    for (int i = 0; i < a->nworkers; i++) {
        if (a->workers[i].paused && a->workers[i].running)
            (void)ddp_agent_signal_worker(a, i, SIGCONT);
        a->workers[i].paused = false;
    }
    double now = ddp_clock_mono();
    for (int i = 0; i < a->nworkers; i++)
        a->workers[i].active_at = now;
    a->paused = false;
    a->resumed_at = now;
    ddp_file_timer_hold(a->file_timer, false);
    if (now > a->paused_at)
        ddp_file_timer_postpone(a->file_timer, now - a->paused_at);
}

/* This node continued (or was continued before it stopped): the job's pause of its
 * Ctrl-Z ends here, and at the other nodes once no other node holds it. Whether the job's
 * pause goes on (this node's workers then continue with the job's: CMD_CONTINUE). */
static bool resume_job(ddp_agent_t *a)
{
    bool held = a->remote_paused;
    if (a->coord != NULL && a->pause > 0) {
        ddp_rdzv_coord_resume(a->coord, a->pause);
        held = held || ddp_rdzv_coord_paused(a->coord);
    } else if (a->pause_asked) {
        ddp_rdzv_post_pause(a->rdzv, false);
        held = held || a->job_paused;
    }
    a->pause = 0;
    a->pause_asked = false;
    return held;
}

/* Stops the workers, then ddp-launch itself until continued; then the workers, and (a
 * multi-node job) the other nodes' too. */
static void stop_here(ddp_agent_t *a)
{
    int n = stop_workers(a); /* (those the job's pause stopped already among them) */
    bool host = a->coord != NULL && a->pause > 0, all = host || a->job_paused;
    if (n > 0 || all)
        ddp_log_info(a->log,
                     "stopped (SIGTSTP): %d worker(s)%s stop with ddp-launch and continue with "
                     "it (fg, bg, SIGCONT)",
                     n,
                     host  ? " here and every other node's (the job's store is here)"
                     : all ? " here and every other node's"
                           : "");
    raise(SIGSTOP); /* here until continued */
    bool held = resume_job(a);
    if (!held)
        continue_workers(a);
    if (a->remote_paused && n > 0)
        ddp_log_info(a->log,
                     "continued: the %d stopped worker(s) continue when the job's pause ends "
                     "(Ctrl-Z on another node too)",
                     n);
    else if (n > 0 || all)
        ddp_log_info(a->log, "continued: the %d stopped worker(s)%s continue%s", n,
                     all ? " here and the other nodes'" : "",
                     held ? " once every node stopped by Ctrl-Z has continued" : "");
}

static void on_pause_delay(uv_timer_t *timer)
{
    stop_here(timer->data);
}

/* Where this launcher hosts the store of a multi-node job, the other nodes are told first
 * (their workers stop as these do, and their launchers wait without heartbeats, which
 * the stopped store could not answer), and this one stops PAUSE_DELAY_MS later, once the
 * news has gone out. */
#define PAUSE_DELAY_MS 300

static void on_tstp(uv_signal_t *handle, int sig)
{
    ddp_agent_t *a = handle->data;
    (void)sig;
    if (a->pause > 0 || a->pause_asked)
        return; /* stopping already */
    a->pause = a->coord != NULL ? ddp_rdzv_coord_pause(a->coord) : 0;
    /* Another node serves the store: it is asked to pause the job (its answer, the job's
     * pause, comes as this node's own CMD_PAUSE, or not at all: then this one stops alone). */
    a->pause_asked = a->coord == NULL && a->rdzv != NULL && a->state == AGENT_RUNNING;
    if (a->pause_asked)
        ddp_rdzv_post_pause(a->rdzv, true);
    if (a->pause == 0 && !a->pause_asked) {
        stop_here(a);
        return;
    }
    ddp_log_debug(a->log, "stopped (SIGTSTP): the other nodes are told; stopping here in %d ms",
                  PAUSE_DELAY_MS);
    uv_timer_start(&a->pause_timer, on_pause_delay, PAUSE_DELAY_MS, 0);
}

/* SIGCONT (fg, bg, kill -CONT) while the store's host waits to stop: the stop is off, as
 * a stop and continue at once would be (else it would stop after its continue, until a
 * second one). After a stop (stop_here) this comes with nothing to do. */
static void on_cont(uv_signal_t *handle, int sig)
{
    ddp_agent_t *a = handle->data;
    (void)sig;
    if ((a->pause == 0 && !a->pause_asked) || !uv_is_active((uv_handle_t *)&a->pause_timer))
        return;
    uv_timer_stop(&a->pause_timer);
    (void)resume_job(a); /* (no worker stopped yet) */
    ddp_log_info(a->log,
                 "continued before it stopped (SIGCONT within %d ms of SIGTSTP): the "
                 "other nodes' workers continue",
                 PAUSE_DELAY_MS);
}

void ddp_agent_remote_pause(ddp_agent_t *a, bool pause, bool own, const char *who)
{
    if (own) { /* its own Ctrl-Z stopped this node's workers; the job's end of it */
        a->job_paused = pause;
        if (!pause)
            continue_workers(a); /* (nothing to do where this node's continue did it) */
        return;
    }
    a->remote_paused = pause;
    if (pause) {
        int n = stop_workers(a);
        if (n > 0)
            ddp_log_warn(a->log,
                         "%s was stopped (Ctrl-Z there): this node's %d worker(s) stop with it "
                         "until it continues",
                         who, n);
        else
            ddp_log_warn(a->log,
                         "%s was stopped (Ctrl-Z there): this node waits until it continues", who);
    } else {
        int n = 0;
        for (int i = 0; i < a->nworkers; i++)
            n += a->workers[i].paused;
        continue_workers(a);
        ddp_log_info(a->log, "%s continued%s", who, n > 0 ? ": so do this node's workers" : "");
    }
}

/* The terminal was resized: the workers' pseudo-terminals (output.c) take its size, and
 * their groups get SIGWINCH, as torchrun's workers, in its process group, get it from the
 * terminal itself. */
static void on_winch(uv_signal_t *handle, int sig)
{
    ddp_agent_t *a = handle->data;
    ddp_output_resize(&a->output);
    ddp_agent_signal_running(a, sig);
}

void ddp_agent_pause_init(ddp_agent_t *a)
{
    uv_signal_init(&a->loop, &a->tstp);
    a->tstp.data = a;
    uv_signal_init(&a->loop, &a->cont);
    a->cont.data = a;
    uv_signal_init(&a->loop, &a->winch);
    a->winch.data = a;
    uv_timer_init(&a->loop, &a->pause_timer);
    a->pause_timer.data = a;
}

int ddp_agent_pause_start(ddp_agent_t *a)
{
    struct sigaction sa;
    /* Ignored by whoever started ddp-launch (a shell's job without job control): the
     * workers were told to ignore it too, and so does ddp-launch. A container's init (pid
     * 1) cannot stop itself (its SIGSTOP is discarded): there, as for any init, SIGTSTP is
     * ignored, not a stop of the workers continued at once. */
    int err = isatty(1) || isatty(2) ? uv_signal_start(&a->winch, on_winch, SIGWINCH) : 0;
    if (err != 0 || (sigaction(SIGTSTP, NULL, &sa) == 0 && sa.sa_handler == SIG_IGN) ||
        getpid() == 1)
        return err;
    if ((err = uv_signal_start(&a->tstp, on_tstp, SIGTSTP)) != 0)
        return err;
    return uv_signal_start(&a->cont, on_cont, SIGCONT);
}
