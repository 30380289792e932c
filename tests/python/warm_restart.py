"""A worker restarted by ddp-launch, cold or warm (--warm-restarts), for the tests.

usage: warm_restart.py state | hold | once | always CODE | record

On attempt 0 rank 1 exits 3 (always: CODE, on every attempt), once the file WARM_TRIGGER
names exists where it is set, before it joins the gloo group; the other ranks (all of them,
later) join it and all-reduce. On later attempts:
  state  prints a STATE line: one JSON object of what the process is (environment,
         argv, sys.path, __main__, cwd, session, parent-death signal, signal dispositions
         and mask, limits, affinity, its descriptors, stdio buffering), with its run's
         log directory written <RUN>, the store's port <PORT> and the launcher's
         checkpoint directory <CHECKPOINTS>; then a RANDOM line
         (each rank's own draws: Python's random, numpy's global generator and a
         default_rng(), torch's initial seed and a draw of its default generator).
  hold   prints HOLD with its pid and sleeps: a job to kill the launcher of;
  once   nothing more: the job ends well;
  record rank 1 raises on every attempt, under torch's @record: its error.json.
"""
import ctypes
import json
import os
import random
import resource
import signal
import stat
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

# From this file's folder, which sys.path lacks under -m and the torch 2.6 tests' shim; the
# path is put back as it was, for what the script shows of it.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from warm_trigger import wait_for_trigger  # noqa: E402

del sys.path[0]

PR_GET_PDEATHSIG = 2


def unix_socket_inodes():
    """The inodes of the Unix sockets there are (/proc/net/unix's 7th column)."""
    with open("/proc/net/unix") as f:
        next(f)
        return {line.split()[6] for line in f if len(line.split()) > 6}


def descriptors():
    """What the standard descriptors are, and what the others are whatever their numbers
    (the order in which torch and gloo open theirs varies), pipes and Unix sockets without
    their inode numbers. TCP sockets are left out: how many gloo and the store client
    hold at a moment varies from run to run, cold or warm (a connection still closing);
    a descriptor the zygote leaked would be a Unix socket or a pipe."""
    standard, others = {}, []
    unix = unix_socket_inodes()
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue  # the listing's own
        if target.startswith("socket:["):
            inode = target[len("socket:["):-1]
            if inode not in unix:
                continue
            target = "unix socket"
        target = target.split(":[")[0] if ":[" in target else target
        if int(name) <= 2:
            standard[name] = target
        else:
            others.append(target)
    return {"standard": standard, "others": sorted(others)}


def state():
    main = sys.modules["__main__"]
    libc = ctypes.CDLL(None, use_errno=True)
    sig = ctypes.c_int(0)
    libc.prctl(PR_GET_PDEATHSIG, ctypes.byref(sig), 0, 0, 0)
    with open(f"/proc/{os.getppid()}/comm") as f:
        parent = f.read().strip()
    port = os.environ.get("MASTER_PORT", "")
    fds = descriptors()
    return {
        "env": dict(os.environ),
        "argv": sys.argv,
        "orig_argv": getattr(sys, "orig_argv", None),
        "path": sys.path,
        "main": {
            "name": main.__name__,
            "file": main.__file__,
            "spec": repr(main.__spec__),
            "loader": type(main.__loader__).__name__,
            "package": main.__package__,
            "cached": main.__cached__,
            "doc": main.__doc__,
            "builtins": getattr(main.__builtins__, "__name__", "dict"),
        },
        "cwd": os.getcwd(),
        "leads_session": os.getsid(0) == os.getpid(),
        "leads_group": os.getpgid(0) == os.getpid(),
        "parent": parent,
        "pdeathsig": sig.value,
        "signals": {s.name: str(signal.getsignal(s)) for s in signal.Signals
                    if s not in (signal.SIGKILL, signal.SIGSTOP)},
        "blocked": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
        "nofile": list(resource.getrlimit(resource.RLIMIT_NOFILE)),
        "affinity": sorted(os.sched_getaffinity(0)),
        "umask": os.umask(0o022),
        "fds": fds,
        "stdin": stat.S_IFMT(os.fstat(0).st_mode),
        "stdout": [sys.stdout.line_buffering, sys.stdout.write_through,
                   stat.S_IFMT(os.fstat(1).st_mode)],
        "stderr": [sys.stderr.line_buffering, sys.stderr.write_through,
                   stat.S_IFMT(os.fstat(2).st_mode)],
        "flags": str(sys.flags),
        "port": port,
    }, port


def main():
    mode = sys.argv[1]
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    rank = int(os.environ["RANK"])
    # Rank 1 fails before it joins the group: a process that exits with a gloo group it
    # has not destroyed may abort in its threads' teardown ("terminate called without an
    # active exception", torch 1.13) instead of exiting with its own status.
    if rank == 1 and (attempt == 0 or mode == "always"):
        if attempt == 0:
            wait_for_trigger()
        print(f"rank 1 fails on attempt {attempt}", flush=True)
        sys.exit(int(sys.argv[2]) if mode == "always" else 3)
    if mode == "record" and rank == 1:
        raise RuntimeError(f"deliberate failure at attempt {attempt}")
    dist.init_process_group("gloo", init_method="env://")
    value = torch.tensor([float(rank + 1)])
    dist.all_reduce(value)
    if mode == "hold" and attempt > 0:
        print(f"HOLD rank {rank} pid {os.getpid()}", flush=True)
        time.sleep(300)
    dist.barrier()
    if mode == "state" and attempt > 0:
        found, port = state()
        del found["env"]["WARM_TRIGGER"]  # the test's, another file each run
        if "DDP_TRIXIE_ROOT" in os.environ:
            # The torch 2.6 tests' shim (tests/torch26) runs a cold worker's script from its
            # own __main__ and sys.path, after a shell's cd: those are the shim's, not ours.
            for key in ("main", "orig_argv", "path"):
                del found[key]
            for name in ("PWD", "OLDPWD"):
                found["env"].pop(name, None)
        run = os.path.dirname(os.path.dirname(os.path.dirname(
            os.environ["TORCHELASTIC_ERROR_FILE"])))
        text = json.dumps(found, sort_keys=True).replace(run, "<RUN>")
        # The launcher's checkpoint directory, a name of its own each job.
        checkpoints = os.environ.get("DDP_CHECKPOINT_DIR")
        if checkpoints:
            text = text.replace(checkpoints, "<CHECKPOINTS>")
        print("STATE " + text.replace(f'"{port}"', '"<PORT>"'), flush=True)
        import numpy
        print(f"RANDOM rank {rank} {random.random()} {numpy.random.randint(1 << 30)} "
              f"{numpy.random.default_rng().integers(1 << 30)} {torch.initial_seed()} "
              f"{torch.randint(1 << 30, (1,)).item()}", flush=True)
    dist.destroy_process_group()


# @record only where its error.json is the point: elsewhere a rank whose store wait fails
# as its peer exits would write one or not, as the stop's SIGTERM comes before or after.
(record(main) if sys.argv[1] == "record" else main)()
