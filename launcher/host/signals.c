/* Signal names and the forwardable signals (see signals.h). */
#include "host/signals.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Signals that may be forwarded: the catchable ones whose default is to end the
 * process and that are not faults of the launcher itself. */
static const int forwardable[] = {SIGHUP,  SIGINT,  SIGQUIT,   SIGTERM, SIGUSR1, SIGUSR2,
                                  SIGALRM, SIGXCPU, SIGVTALRM, SIGPROF, SIGPWR};

const char *ddp_signal_name(int sig, char *buf, size_t cap)
{
    const char *abbrev = sig > 0 && sig < NSIG ? sigabbrev_np(sig) : NULL;
    if (abbrev == NULL)
        snprintf(buf, cap, "SIG%d", sig);
    else
        snprintf(buf, cap, "SIG%s", abbrev);
    return buf;
}

int ddp_signal_forwardable(const char *name)
{
    for (size_t i = 0; i < sizeof forwardable / sizeof forwardable[0]; i++) {
        if (strcasecmp(name, sigabbrev_np(forwardable[i])) == 0)
            return forwardable[i];
    }
    return 0;
}

size_t ddp_signal_forwardables(const int **list)
{
    *list = forwardable;
    return sizeof forwardable / sizeof forwardable[0];
}
