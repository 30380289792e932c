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
#include <stdlib.h>
#include <unistd.h>

/* Signals the groups of the workers in `which` (running ones); each is cleared when the
 * signal cannot be sent. */
static void signal_groups(ddp_agent_t *a, bool *which, int sig)
{
    for (int i = 0; i < a->nworkers; i++)
        if (which[i] && a->workers[i].running)
            which[i] = ddp_agent_signal_worker(a, i, sig) == 0;
}

static void on_tstp(uv_signal_t *handle, int sig)
{
    ddp_agent_t *a = handle->data;
    (void)sig;
    /* Only the workers not already stopped (SIGSTOP, a debugger) are continued later. */
    bool *paused = calloc((size_t)a->nworkers + 1, sizeof *paused);
    int n = 0;
    for (int i = 0; paused != NULL && i < a->nworkers; i++) {
        paused[i] = a->workers[i].running && !ddp_proc_stopped(a->workers[i].pid);
        n += paused[i];
    }
    if (n > 0)
        ddp_log_info(a->log,
                     "stopped (SIGTSTP): %d worker(s) stop with ddp-launch and continue with "
                     "it (fg, bg, SIGCONT)",
                     n);
    if (paused != NULL)
        signal_groups(a, paused, SIGSTOP);
    double stopped_at = ddp_clock_mono();
    raise(SIGSTOP); /* here until continued */
    if (paused != NULL)
        signal_groups(a, paused, SIGCONT);
    /* The time stopped is no worker's hang, nor on its watchdog timers. */
    double now = ddp_clock_mono();
    for (int i = 0; i < a->nworkers; i++)
        a->workers[i].active_at = now;
    if (now > stopped_at)
        ddp_file_timer_postpone(a->file_timer, now - stopped_at);
    if (n > 0)
        ddp_log_info(a->log, "continued: the %d stopped worker(s) continue", n);
    free(paused);
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
    uv_signal_init(&a->loop, &a->winch);
    a->winch.data = a;
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
    return uv_signal_start(&a->tstp, on_tstp, SIGTSTP);
}
