"""A --preload module that initialises CUDA when imported: ddp-launch's zygote must refuse
to fork workers from a process in that state (a forked child cannot use CUDA).

With a GPU it calls torch.cuda.init(). Without one CUDA cannot start, so it sets the flag
torch.cuda.init() sets (torch.cuda._initialized), which is what torch.cuda.is_initialized()
and so the zygote's check read: the refusal, not CUDA, is what a test here can show.
"""
import torch

if torch.cuda.is_available():
    torch.cuda.init()
else:
    torch.cuda._initialized = True
