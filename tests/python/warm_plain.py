"""A plain Python worker (no torch) restarted by ddp-launch, cold or with --warm-restarts.

usage: warm_plain.py raise | hang | show | place | devices | process | proc | state | spin |
       marker
       (or python -m warm_plain ...)

On attempt 0 rank 1 exits 3 (once the file WARM_TRIGGER names exists, where it is set)
and rank 0 waits to be stopped; but for
  spin   rank 0 prints SPINNING with its pid and keeps a CPU busy until the file
         WARM_TRIGGER.rest exists, prints RESTING, and exits 3 once WARM_TRIGGER exists;
  marker on every attempt: where WARM_TRIGGER exists each rank prints DONE with its
         GROUP_RANK and RANK and ends well, else it prints "ready" and waits to be stopped.
On attempt 1:
  raise  rank 1 raises ValueError from a function (its traceback is the interpreter's),
         rank 0 ends well;
  hang   both ranks sleep in stuck_here() without output: a hang to report;
  show   each rank prints SHOW with its sys.argv, sys.path[0], __file__ and __name__;
  place  each rank prints CPUS=<its Cpus_allowed_list> and POLICY=<the memory policy
         numa_maps gives its first mapping>, as tests/helpers/test_worker.c placement;
  devices each rank prints DEVICES with its LOCAL_RANK and CUDA_VISIBLE_DEVICES.
  process each rank prints PROCESS with its signal dispositions, blocked signals and
         umask, and a line on stderr; then rank 1 exits 4 once rank 0 has printed, and
         rank 0 sleeps until it is stopped.
  proc   each rank prints PROC with its /proc/self/cmdline and whether its
         /proc/self/environ is its os.environ (what tools that read /proc see).
With
  state  on attempts 0 and 1 each rank prints STATE with its attempt and everything its
         start set up (process_record); on attempt 0 rank 1 then fails (at the trigger)
         and rank 0 waits to be stopped, on attempt 1 both end well.
"""
import json
import os
import re
import signal
import sys
import time

# From this file's folder, which sys.path lacks under -m and the torch 2.6 tests' shim; the
# path is put back as it was, for what the script shows of it.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from warm_trigger import wait_for_trigger  # noqa: E402

del sys.path[0]

attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
rank = int(os.environ["RANK"])


def fail_here():
    raise ValueError(f"deliberate failure of rank {rank} at attempt {attempt}")


def stuck_here():
    time.sleep(120)


def process_state():
    """What a process inherits from its parent that a preloaded module could change."""
    umask = os.umask(0o022)
    os.umask(umask)
    return json.dumps({
        "signals": {s.name: str(signal.getsignal(s)) for s in signal.Signals
                    if s not in (signal.SIGKILL, signal.SIGSTOP)},
        "blocked": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
        "umask": oct(umask),
    }, sort_keys=True)


def proc_view():
    """The command line and environment /proc shows of this process, as ps and pgrep see
    them: the arguments, and the environment's difference from os.environ (names only)."""
    with open("/proc/self/cmdline", "rb") as f:
        args = f.read().split(b"\0")[:-1]
    with open("/proc/self/environ", "rb") as f:
        entries = [e.partition(b"=") for e in f.read().split(b"\0")[:-1]]
    shown = {name: value for name, _, value in entries}
    own = dict(os.environb)
    missing = sorted(n.decode() for n in own if shown.get(n) != own[n])
    extra = sorted(n.decode() for n in shown if n not in own)
    same = "same" if not missing and not extra and len(entries) == len(own) else \
        f"differs: missing or other {missing[:8]}, extra {extra[:8]}, {len(entries)} entries"
    return f"cmdline {[a.decode() for a in args]} environ {same}"


def process_record():
    """Everything a worker's start sets up, as the worker sees it and /proc shows it, in one
    line: its session and group, its parent and the parent-death signal, its limits, its
    CPUs and memory policy, its signal dispositions, mask and the kernel's view of them,
    its descriptors, its environment and command line as /proc shows them, its cwd, umask,
    niceness and scheduler. What differs by the attempt alone (its number, its directory)
    is written as N."""
    import ctypes
    import resource
    libc = ctypes.CDLL(None, use_errno=True)
    pdeathsig = ctypes.c_int(-1)
    libc.prctl(2, ctypes.byref(pdeathsig), 0, 0, 0)  # PR_GET_PDEATHSIG
    pid = os.getpid()

    def same_attempt(text):
        return re.sub(r"attempt_\d+", "attempt_N", text)

    status = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("SigBlk", "SigIgn", "SigCgt", "Cpus_allowed_list", "Mems_allowed_list",
                       "NoNewPrivs", "Seccomp", "CapInh", "CapPrm", "CapEff", "CapBnd"):
                status[key] = value.strip()
    with open("/proc/self/numa_maps") as f:
        policy = f.readline().split()[1]
    fds = {}
    for fd in sorted(os.listdir("/proc/self/fd"), key=int):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # the listing's own, closed by now
        fds[fd] = same_attempt(re.sub(r"^(pipe|socket):\[\d+\]$", r"\1", target))
    with open("/proc/self/cmdline", "rb") as f:
        cmdline = [a.decode() for a in f.read().split(b"\0")[:-1]]
    with open("/proc/self/environ", "rb") as f:
        environ = sorted(same_attempt(e.decode(errors="replace"))
                         for e in f.read().split(b"\0")[:-1])
    environ = [re.sub(r"^TORCHELASTIC_RESTART_COUNT=\d+$", "TORCHELASTIC_RESTART_COUNT=N", e)
               for e in environ]
    umask = os.umask(0o022)
    os.umask(umask)
    return json.dumps({
        "session leader": os.getsid(0) == pid,
        "group leader": os.getpgid(0) == pid,
        "parent": os.getppid(),
        "pdeathsig": pdeathsig.value,
        "rlimits": {name: resource.getrlimit(getattr(resource, name))
                    for name in sorted(dir(resource)) if name.startswith("RLIMIT_")},
        "affinity": sorted(os.sched_getaffinity(0)),
        "memory policy": policy,
        "status": status,
        "signals": {s.name: str(signal.getsignal(s)) for s in signal.Signals
                    if s not in (signal.SIGKILL, signal.SIGSTOP)},
        "blocked": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
        "fds": fds,
        "environ": environ,
        "environ is os.environ": len(environ) == len(os.environb),
        "cmdline": cmdline,
        "cwd": os.getcwd(),
        "umask": oct(umask),
        "nice": os.nice(0),
        "scheduler": os.sched_getscheduler(0),
    }, sort_keys=True)


def stopped_after_rank_1():
    """process: rank 0 says so and waits to be stopped; rank 1 fails once rank 0 said so."""
    mark = os.environ["WARM_TRIGGER"] + ".printed"
    if rank == 0:
        open(mark, "w").close()
        time.sleep(120)
    deadline = time.monotonic() + 60
    while not os.path.exists(mark) and time.monotonic() < deadline:
        time.sleep(0.01)
    sys.exit(4)


def spin():
    """Busy (the look for the file is the work) until the file WARM_TRIGGER.rest exists."""
    print(f"SPINNING pid {os.getpid()}", flush=True)
    rest = os.environ["WARM_TRIGGER"] + ".rest"
    deadline = time.monotonic() + 120
    while not os.path.exists(rest) and time.monotonic() < deadline:
        pass
    print("RESTING", flush=True)


if sys.argv[1] == "state":
    print(f"STATE rank {rank} attempt {attempt} {process_record()}", flush=True)
    if attempt == 1:
        sys.exit(0)
    if rank == 1:
        wait_for_trigger()
        sys.exit(3)
    time.sleep(60)
elif sys.argv[1] == "marker":
    if os.path.exists(os.environ["WARM_TRIGGER"]):
        print(f"DONE group rank {os.environ['GROUP_RANK']} rank {rank}", flush=True)
        sys.exit(0)
    print("ready", flush=True)
    time.sleep(600)
elif attempt == 0 and sys.argv[1] == "spin":
    if rank == 0:
        spin()
    wait_for_trigger()
    sys.exit(3)
elif attempt == 0:
    if rank == 1:
        wait_for_trigger()
        print("rank 1 fails on attempt 0", flush=True)
        sys.exit(3)
    time.sleep(60)
elif sys.argv[1] == "raise" and rank == 1:
    fail_here()
elif sys.argv[1] == "place":
    with open("/proc/self/status") as f:
        cpus = [line.split()[1] for line in f if line.startswith("Cpus_allowed_list:")]
    with open("/proc/self/numa_maps") as f:
        policy = f.readline().split()[1]
    print(f"CPUS={cpus[0]}\nPOLICY={policy}", flush=True)
elif sys.argv[1] == "devices":
    print(f"DEVICES rank {rank} local rank {os.environ['LOCAL_RANK']} visible "
          f"{os.environ.get('CUDA_VISIBLE_DEVICES')}", flush=True)
elif sys.argv[1] == "show":
    print(f"SHOW rank {rank} {sys.argv} {sys.path[0]} {__file__} {__name__}", flush=True)
elif sys.argv[1] == "process":
    print(f"PROCESS rank {rank} {process_state()}", flush=True)
    print(f"PROCESS rank {rank} on stderr", file=sys.stderr, flush=True)
    stopped_after_rank_1()
elif sys.argv[1] == "proc":
    print(f"PROC rank {rank} {proc_view()}", flush=True)
elif sys.argv[1] == "hang":
    print(f"rank {rank} hangs at attempt {attempt}", flush=True)
    stuck_here()
print(f"rank {rank} done at attempt {attempt}", flush=True)
