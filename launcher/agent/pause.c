/* The terminal's signals on the agent's side (see agent/pause.h). Ctrl-Z: each worker
 * runs in its own session, so the terminal's SIGTSTP reaches only ddp-launch, which would
 * stand still while its workers went on (torchrun's workers of torch 2.x too). The workers
 * stop with it and go on when it does (fg, bg, SIGCONT). They get SIGSTOP: a session of its
 * own is an orphaned process group, where the kernel discards SIGTSTP. A resize (SIGWINCH)
 * is passed on. Runs on the loop thread.
 *
 * Where the store is, this node's own Ctrl-Z is a pause of the job (`own`): none; HOSTED,
 * the job's pause K on this node's coordinator; or ASKED of the node that serves the store,
 * whose answer, the job's pause, comes back as this node's own CMD_PAUSE (job_paused). */
#include "agent/pause.h"

#include "io.h"
#include "host/proc.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

typedef enum {
    OWN_NONE,   /* no Ctrl-Z of this node's is on */
    OWN_HOSTED, /* the job's pause `number`, on this node's coordinator */
    OWN_ASKED,  /* asked of the node that serves the store */
} own_pause_t;

struct ddp_pause_s {
    ddp_group_t *g;
    uv_signal_t tstp;  /* Ctrl-Z: the workers stop too */
    uv_signal_t cont;  /* continued before that stop */
    uv_signal_t winch; /* the terminal resized: the workers' pseudo-terminals too */
    uv_timer_t delay;  /* Ctrl-Z where the store is: the others are told, then we stop */
    own_pause_t own;
    int number;         /* OWN_HOSTED: the pause's number (ddp_rdzv_coord_pause) */
    bool job_paused;    /* the job's pause of this node's Ctrl-Z is on (its news came) */
    bool remote_paused; /* another node's pause of the job is on (its workers stopped) */
    bool stopped;       /* the workers are (the store's host stopped: this loop runs on) */
    double stopped_at;  /* when the workers were last stopped by a Ctrl-Z */
    double resumed_at;  /* when they were last continued */
    bool *held;         /* by local rank: stopped here, to be continued */
};

int ddp_pause_new(ddp_group_t *g, ddp_pause_t **out)
{
    ddp_pause_t *p = calloc(1, sizeof *p);
    if (p == NULL || (p->held = calloc((size_t)g->nworkers + 1, sizeof *p->held)) == NULL) {
        free(p);
        return -ENOMEM;
    }
    p->g = g;
    uv_signal_init(g->loop, &p->tstp);
    p->tstp.data = p;
    uv_signal_init(g->loop, &p->cont);
    p->cont.data = p;
    uv_signal_init(g->loop, &p->winch);
    p->winch.data = p;
    uv_timer_init(g->loop, &p->delay);
    p->delay.data = p;
    *out = p;
    return 0;
}

void ddp_pause_close(ddp_pause_t *p)
{
    uv_close((uv_handle_t *)&p->tstp, NULL);
    uv_close((uv_handle_t *)&p->cont, NULL);
    uv_close((uv_handle_t *)&p->winch, NULL);
    uv_close((uv_handle_t *)&p->delay, NULL);
}

void ddp_pause_free(ddp_pause_t *p)
{
    if (p == NULL)
        return;
    free(p->held);
    free(p);
}

bool ddp_pause_stopped(const ddp_pause_t *p)
{
    return p->stopped;
}

double ddp_pause_resumed_at(const ddp_pause_t *p)
{
    return p->resumed_at;
}

/* Stops (SIGSTOP) the running workers not already stopped (SIGSTOP, a debugger, or a
 * pause of ours): those are held, to be continued later. The count of held workers. */
static int stop_workers(ddp_pause_t *p)
{
    const ddp_group_t *g = p->g;
    int n = 0;
    for (int i = 0; i < g->nworkers; i++) {
        const ddp_worker_t *w = &g->workers[i];
        if (!p->held[i])
            p->held[i] = w->running && !ddp_proc_stopped(w->pid) &&
                         ddp_group_signal_worker(g, i, SIGSTOP) == 0;
        n += p->held[i];
    }
    p->stopped = true;
    p->stopped_at = ddp_clock_mono();
    ddp_file_timer_hold(g->file_timer, true);
    return n;
}

/* Continues the workers stop_workers() stopped. The time stopped is no worker's hang
 * (quiet time counts from now: ddp_pause_resumed_at), nor on its watchdog timers. */
static void continue_workers(ddp_pause_t *p)
{
    const ddp_group_t *g = p->g;
    if (!p->stopped)
        return; /* (continued already: the timers were postponed then) */
    for (int i = 0; i < g->nworkers; i++) {
        if (p->held[i] && g->workers[i].running)
            (void)ddp_group_signal_worker(g, i, SIGCONT);
        p->held[i] = false;
    }
    double now = ddp_clock_mono();
    p->stopped = false;
    p->resumed_at = now;
    ddp_file_timer_hold(g->file_timer, false);
    if (now > p->stopped_at)
        ddp_file_timer_postpone(g->file_timer, now - p->stopped_at);
}

/* This node continued (or was continued before it stopped): the job's pause of its
 * Ctrl-Z ends here, and at the other nodes once no other node holds it. Whether the job's
 * pause goes on (this node's workers then continue with the job's: CMD_CONTINUE). */
static bool resume_job(ddp_pause_t *p)
{
    const ddp_group_t *g = p->g;
    bool held = p->remote_paused;
    if (p->own == OWN_HOSTED && g->coord != NULL) {
        ddp_rdzv_coord_resume(g->coord, p->number);
        held = held || ddp_rdzv_coord_paused(g->coord);
    } else if (p->own == OWN_ASKED) {
        ddp_rdzv_post_pause(g->rdzv, false);
        held = held || p->job_paused;
    }
    p->own = OWN_NONE;
    p->number = 0;
    return held;
}

/* Stops the workers, then ddp-launch itself until continued; then the workers, and (a
 * multi-node job) the other nodes' too. */
static void stop_here(ddp_pause_t *p)
{
    const ddp_group_t *g = p->g;
    int n = stop_workers(p); /* (those the job's pause stopped already among them) */
    bool host = p->own == OWN_HOSTED && g->coord != NULL, all = host || p->job_paused;
    if (n > 0 || all)
        ddp_log_info(g->log,
                     "stopped (SIGTSTP): %d worker(s)%s stop with ddp-launch and continue with "
                     "it (fg, bg, SIGCONT)",
                     n,
                     host  ? " here and every other node's (the job's store is here)"
                     : all ? " here and every other node's"
                           : "");
    raise(SIGSTOP); /* here until continued */
    bool held = resume_job(p);
    if (!held)
        continue_workers(p);
    if (p->remote_paused && n > 0)
        ddp_log_info(g->log,
                     "continued: the %d stopped worker(s) continue when the job's pause ends "
                     "(Ctrl-Z on another node too)",
                     n);
    else if (n > 0 || all)
        ddp_log_info(g->log, "continued: the %d stopped worker(s)%s continue%s", n,
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
    ddp_pause_t *p = handle->data;
    const ddp_group_t *g = p->g;
    (void)sig;
    if (p->own != OWN_NONE)
        return; /* stopping already */
    p->number = g->coord != NULL ? ddp_rdzv_coord_pause(g->coord) : 0;
    if (p->number > 0) {
        p->own = OWN_HOSTED;
    } else if (g->coord == NULL && g->rdzv != NULL && g->state == DDP_AGENT_RUNNING) {
        /* Another node serves the store: it is asked to pause the job (its answer, the
         * job's pause, comes as this node's own CMD_PAUSE, or not at all: then this one
         * stops alone). */
        p->own = OWN_ASKED;
        ddp_rdzv_post_pause(g->rdzv, true);
    } else {
        stop_here(p);
        return;
    }
    ddp_log_debug(g->log, "stopped (SIGTSTP): the other nodes are told; stopping here in %d ms",
                  PAUSE_DELAY_MS);
    uv_timer_start(&p->delay, on_pause_delay, PAUSE_DELAY_MS, 0);
}

/* SIGCONT (fg, bg, kill -CONT) while the store's host waits to stop: the stop is off, as
 * a stop and continue at once would be (else it would stop after its continue, until a
 * second one). After a stop (stop_here) this comes with nothing to do. */
static void on_cont(uv_signal_t *handle, int sig)
{
    ddp_pause_t *p = handle->data;
    (void)sig;
    if (p->own == OWN_NONE || !uv_is_active((uv_handle_t *)&p->delay))
        return;
    uv_timer_stop(&p->delay);
    (void)resume_job(p); /* (no worker stopped yet) */
    ddp_log_info(p->g->log,
                 "continued before it stopped (SIGCONT within %d ms of SIGTSTP): the "
                 "other nodes' workers continue",
                 PAUSE_DELAY_MS);
}

void ddp_pause_remote(ddp_pause_t *p, bool pause, bool own, const char *who)
{
    const ddp_group_t *g = p->g;
    if (own) { /* its own Ctrl-Z stopped this node's workers; the job's end of it */
        p->job_paused = pause;
        if (!pause)
            continue_workers(p); /* (nothing to do where this node's continue did it) */
        return;
    }
    p->remote_paused = pause;
    if (pause) {
        int n = stop_workers(p);
        if (n > 0)
            ddp_log_warn(g->log,
                         "%s was stopped (Ctrl-Z there): this node's %d worker(s) stop with it "
                         "until it continues",
                         who, n);
        else
            ddp_log_warn(g->log,
                         "%s was stopped (Ctrl-Z there): this node waits until it continues", who);
    } else {
        int n = 0;
        for (int i = 0; i < g->nworkers; i++)
            n += p->held[i];
        continue_workers(p);
        ddp_log_info(g->log, "%s continued%s", who, n > 0 ? ": so do this node's workers" : "");
    }
}

/* The terminal was resized: the workers' pseudo-terminals (output.c) take its size, and
 * their groups get SIGWINCH, as torchrun's workers, in its process group, get it from the
 * terminal itself. */
static void on_winch(uv_signal_t *handle, int sig)
{
    ddp_pause_t *p = handle->data;
    ddp_output_resize(p->g->output);
    ddp_group_signal_running(p->g, sig);
}

int ddp_pause_start(ddp_pause_t *p)
{
    struct sigaction sa;
    /* Ignored by whoever started ddp-launch (a shell's job without job control): the
     * workers were told to ignore it too, and so does ddp-launch. A container's init (pid
     * 1) cannot stop itself (its SIGSTOP is discarded): there, as for any init, SIGTSTP is
     * ignored, not a stop of the workers continued at once. */
    int err = isatty(1) || isatty(2) ? uv_signal_start(&p->winch, on_winch, SIGWINCH) : 0;
    if (err != 0 || (sigaction(SIGTSTP, NULL, &sa) == 0 && sa.sa_handler == SIG_IGN) ||
        getpid() == 1)
        return err;
    if ((err = uv_signal_start(&p->tstp, on_tstp, SIGTSTP)) != 0)
        return err;
    return uv_signal_start(&p->cont, on_cont, SIGCONT);
}
