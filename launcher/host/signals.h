/* Signal names and the signals ddp-launch may forward to its workers. Pure. */
#ifndef DDP_LAUNCHER_HOST_SIGNALS_H
#define DDP_LAUNCHER_HOST_SIGNALS_H

#include <stddef.h>

/* The name of signal `sig` with its SIG prefix ("SIGTERM"), or "SIG<n>" when unknown;
 * into buf[cap], which is returned. */
const char *ddp_signal_name(int sig, char *buf, size_t cap);

/* The forwardable signal called `name` (without SIG, any case: "term", "USR1"), or 0. */
int ddp_signal_forwardable(const char *name);

/* The forwardable signals (every catchable one whose default ends a process and that
 * is not a fault of the launcher itself): their count, the list into *list. */
size_t ddp_signal_forwardables(const int **list);

#endif
