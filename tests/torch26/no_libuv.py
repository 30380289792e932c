"""Runs a worker script under Debian trixie's torch 2.6 with TCPStore told use_libuv=False.

Debian built torch 2.6 without libuv, but 2.6's TCPStore asks for libuv by default
(pytorch/pytorch#148283), and init_process_group's agent-store path
(TORCHELASTIC_USE_AGENT_STORE=True) makes its TCPStore without a use_libuv argument, so
no setting of the worker reaches it. This shim, used only by the torch 2.6 tests, makes
that TCPStore, and torchrun's own (for the tests that run torchrun), default to
use_libuv=False, then runs the script (or -m module) as
__main__ with the arguments it would have had.

usage: python3 -u no_libuv.py [-m module | script] [args...]
"""
import runpy
import sys

import torch.distributed as dist
import torch.distributed.rendezvous  # noqa: F401 (loads the module patched below)

# Not "import ... as": torch.distributed exports a function named rendezvous too.
rendezvous = sys.modules["torch.distributed.rendezvous"]

_TCPStore = dist.TCPStore


def _tcpstore_without_libuv(*args, **kwargs):
    kwargs.setdefault("use_libuv", False)
    return _TCPStore(*args, **kwargs)


rendezvous.TCPStore = _tcpstore_without_libuv


class _TCPStoreWithoutLibuv(_TCPStore):
    """TCPStore for modules imported from here on (torchrun's static and c10d rendezvous
    make theirs with `from torch.distributed import TCPStore`, without use_libuv)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("use_libuv", False)
        super().__init__(*args, **kwargs)


dist.TCPStore = _TCPStoreWithoutLibuv

args = sys.argv[1:]
if args[:1] == ["-m"]:
    sys.argv = [args[1]] + args[2:]
    runpy.run_module(args[1], run_name="__main__", alter_sys=True)
else:
    sys.argv = args
    runpy.run_path(args[0], run_name="__main__")
