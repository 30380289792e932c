"""bench/checkpoint's end-to-end worker: a DDP job (gloo, CPU) training an MLP with Adam, about
100 MB of state a rank (the model's and the optimizer's state_dict), one rank of which is
SIGKILLed at a step, and which resumes from its checkpoint.

usage: checkpoint_worker.py RESULTS TRIGGER MODE CRASH_STEP [DISK EVERY]

MODE memory: ddp_launch.checkpoint.save(step, state) after every step, load() at the start.
MODE disk: rank 0 torch.save(state) to DISK/state.pt every EVERY steps (written beside it and
renamed: whole or absent), every rank torch.load of it at the start (torchrun's way).

Steps run from 1; each rank's batch of a step is drawn from a generator seeded by the step
and the rank, so a resumed run trains on the same batches. Attempt 0: the last rank, at the
start of step CRASH_STEP once the file TRIGGER is there (the bench makes it once the
launcher is ready for the crash), writes "pace <s>" (its median step, save included) and
"crash <ns>" to RESULTS and SIGKILLs itself. A later attempt: the last rank writes
"back <script start ns> <loaded ns> <step loaded> <ns>" once it has trained step
CRASH_STEP (before that step's save); every rank ends there. Times are CLOCK_MONOTONIC, which every process of the machine
shares.
"""
import os
import signal
import statistics
import sys
import time

started = time.clock_gettime_ns(time.CLOCK_MONOTONIC)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

WIDTH = 2048  # two 2048x2048 layers: 8.4 M parameters, 3 floats each with Adam: ~100 MB
BATCH = 32

results, trigger, mode, crash_step = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
disk = sys.argv[5] if len(sys.argv) > 5 else None
every = int(sys.argv[6]) if len(sys.argv) > 6 else 100
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])


def say(line):
    with open(results, "a") as f:
        f.write(line + "\n")


dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
last = world - 1
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(),
                            torch.nn.Linear(WIDTH, WIDTH))
ddp = torch.nn.parallel.DistributedDataParallel(model)
optim = torch.optim.Adam(ddp.parameters(), lr=1e-4)


def state():
    return {"model": model.state_dict(), "optim": optim.state_dict()}


def restore(got):
    model.load_state_dict(got["model"])
    optim.load_state_dict(got["optim"])


def train(step):
    g = torch.Generator().manual_seed(step * world + rank)
    x = torch.randn(BATCH, WIDTH, generator=g)
    loss = torch.nn.functional.mse_loss(ddp(x), x)
    optim.zero_grad()
    loss.backward()
    optim.step()


# The step to go on from: what the checkpoint holds.
done = 0
if mode == "memory":
    import ddp_launch.checkpoint as ck

    got = ck.load()
    if got is not None:
        done = got[0]
        restore(got[1])
else:
    path = os.path.join(disk, "state.pt")
    if os.path.exists(path):
        got = torch.load(path)
        done = got["step"]
        restore(got)
loaded = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
if attempt > 0 and done >= crash_step:
    sys.exit(f"checkpoint_worker: rank {rank} loaded step {done}, not one before {crash_step}")

paces = []
for step in range(done + 1, crash_step + 1):
    if attempt == 0 and step == crash_step and rank == last:
        deadline = time.monotonic() + 600
        while not os.path.exists(trigger) and time.monotonic() < deadline:
            time.sleep(0.01)
        say(f"pace {statistics.median(paces)}")
        say(f"crash {time.clock_gettime_ns(time.CLOCK_MONOTONIC)}")
        os.kill(os.getpid(), signal.SIGKILL)
    began = time.perf_counter()
    train(step)
    if attempt > 0 and step == crash_step and rank == last:  # training again at the step
        say(f"back {started} {loaded} {done} {time.clock_gettime_ns(time.CLOCK_MONOTONIC)}")
        break
    if mode == "memory":
        if not ck.save(step, state()):
            sys.exit(f"checkpoint_worker: rank {rank}'s save of step {step} was refused")
    elif step % every == 0 and rank == 0:
        aside = os.path.join(disk, ".state.pt.tmp")
        torch.save(dict(state(), step=step), aside)
        os.replace(aside, path)
    paces.append(time.perf_counter() - began)
dist.destroy_process_group()
