"""torchrun's worker watchdog under ddp-launch (TORCHELASTIC_ENABLE_FILE_TIMER=1), with
torch's own client (torch.distributed.elastic.timer.FileTimerClient).

usage: watchdog_timer.py expire | release | foreign

Every rank prints the FIFO it was given, then:
  expire   rank 1 sets a 1 s timer ("stuck_step") and sleeps 60 s in it: the launcher
           kills it; rank 0 finishes;
  release  each rank's step ends within its 30 s timer, which it releases;
  foreign  rank 0 writes a line that is not JSON, an overlong one, and a request for
           its parent (the launcher, which no worker's group holds) that expires at
           once with SIGTERM; all must be refused; then as release.
"""
import json
import os
import sys
import time

from torch.distributed.elastic import timer

path = os.environ["TORCHELASTIC_TIMER_FILE"]
rank = int(os.environ["RANK"])
print(f"rank {rank} timer file {path}", flush=True)
timer.configure(timer.FileTimerClient(path))
if sys.argv[1] == "foreign" and rank == 0:
    fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    os.write(fd, b"not json\n")
    os.write(fd, b"{" + b"x" * 9000 + b"}\n")  # longer than any request of a client
    request = {"version": 1, "pid": os.getppid(), "scope_id": "foreign",
               "expiration_time": time.time(), "signal": 15}
    os.write(fd, (json.dumps(request) + "\n").encode())
    os.close(fd)
    time.sleep(1.5)  # past that expiry
if sys.argv[1] == "expire" and rank == 1:
    with timer.expires(after=1, scope="stuck_step"):
        print("rank 1 stuck", flush=True)
        time.sleep(60)
with timer.expires(after=30, scope="quick_step"):
    time.sleep(0.2)
print(f"rank {rank} done", flush=True)
