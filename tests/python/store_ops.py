"""TCPStore client operations against the launcher's store, from inside a worker.

Rank 0 checks set, get, add, compare_set, wait with and without a timeout, num_keys and
delete_key against MASTER_ADDR:MASTER_PORT (the store ddp-launch hosts); the other ranks
take part in a wait that rank 0's set completes. Exits non-zero on any mismatch.
"""
import datetime
import os
import time

import torch
import torch.distributed as dist

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
assert os.environ["TORCHELASTIC_USE_AGENT_STORE"] == "True"
address = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
timeout = datetime.timedelta(seconds=60)
try:
    # torch 2.x: Debian's 2.6 is built without libuv and must be told so.
    store = dist.TCPStore(*address, world, False, timeout=timeout, use_libuv=False)
except TypeError:
    store = dist.TCPStore(*address, world, False, timeout=timeout)  # torch 1.13

if rank == 0:
    store.set("k1", "hello")
    assert store.get("k1") == b"hello"
    assert store.add("cnt", 5) == 5 and store.add("cnt", -2) == 3
    assert store.get("cnt") == b"3"
    assert store.compare_set("cas", "", "v1") == b"v1"
    assert store.compare_set("cas", "v1", "v2") == b"v2"
    assert store.compare_set("cas", "zz", "v3") == b"v2"
    store.wait(["k1"])
    start = time.monotonic()
    try:
        store.wait(["never"], datetime.timedelta(seconds=1))
        raise AssertionError("a wait for a missing key did not time out")
    except RuntimeError as e:
        assert time.monotonic() - start >= 0.9, e
    # The connection is still in step after the timeout.
    assert store.delete_key("k1") is True and store.delete_key("k1") is False
    before = store.num_keys()
    store.set("go", "now")
    assert store.num_keys() == before + 1
    print(f"rank 0 store ops ok (torch {torch.__version__})", flush=True)
else:
    store.wait(["go"], datetime.timedelta(seconds=60))
    assert store.get("go") == b"now"
    print(f"rank {rank} saw go", flush=True)
