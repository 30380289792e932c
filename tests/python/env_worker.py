"""Prints what a Python worker sees under ddp-launch, as one JSON line per worker."""
import json
import os
import sys

NAMES = ["LOCAL_RANK", "RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
         "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_ERROR_FILE",
         "TORCHELASTIC_USE_AGENT_STORE", "OMP_NUM_THREADS", "NCCL_ASYNC_ERROR_HANDLING",
         "TORCH_NCCL_ASYNC_ERROR_HANDLING", "TORCHELASTIC_SIGNALS_TO_HANDLE"]

print("WORKER " + json.dumps({
    "env": {name: os.environ.get(name) for name in NAMES},
    "argv": sys.argv,
    # sys.orig_argv is the interpreter's own command line: is -u there?
    "unbuffered": int("-u" in sys.orig_argv[1:sys.orig_argv.index(sys.argv[0])]
                      if sys.argv[0] in sys.orig_argv else "-u" in sys.orig_argv),
    "module": __name__,
    "executable": sys.executable,
}, sort_keys=True))
