/* Native stacks of a process's threads through libunwind's ptrace interface, for
 * --hang-dump, with no external tool (eu-stack, gdb) needed.
 *
 * libunwind is loaded with dlopen (libunwind-ptrace.so.0 and the architecture's
 * libunwind), so the launcher starts where it is absent; it is built in where its
 * headers were found (DDP_HAVE_LIBUNWIND). The unwinding runs in a helper process, the
 * launcher's own binary started as DDP_UNWIND_NAME PID: attaching stops the target's
 * threads, and waitpid reports those stops to the tracer, which must not be the agent
 * that reaps its workers by pid. The helper detaches from each thread before it exits,
 * and ends within its caller's timeout (it is killed otherwise: the kernel detaches). */
#ifndef DDP_LAUNCHER_DIAGNOSE_UNWIND_H
#define DDP_LAUNCHER_DIAGNOSE_UNWIND_H

#include <stdbool.h>
#include <stddef.h>

#define DDP_UNWIND_NAME "ddp-stacks"

/* Whether libunwind can be loaded here; if not, `why` (cap bytes) says why. */
bool ddp_unwind_available(char *why, size_t cap);

/* The helper's main: every thread of process `pid_text` as "Thread N (LWP tid):" and
 * its frames "#k  0xADDR in function+0xOFF ()" on stdout; 0, or 1 with the reason on
 * stdout (the caller's file). */
int ddp_unwind_main(const char *pid_text);

#endif
