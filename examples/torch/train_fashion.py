"""train_fashion.py: the FashionMNIST example in PyTorch, with the course's DDP steps.

The same training as the C example (examples/fashion_mnist): the course's FashionCNN or
an MLP, SGD with momentum and a cosine learning rate per step, on Debian's
dataset-fashion-mnist. The DDP steps: init_process_group from the environment the
launcher sets, DistributedSampler with set_epoch, the model wrapped in
DistributedDataParallel, a rank-0 checkpoint after each epoch (resumed from when the
job restarts), the loss all-reduced for the log line, and an end that lets the process
group go while the program still runs (step 6). Runs unchanged under torchrun
and ddp-launch:

    ddp-launch --nproc-per-node=2 examples/torch/train_fashion.py --epochs 1
    torchrun --nproc_per_node=2 examples/torch/train_fashion.py --epochs 1

Prints the same lines as the C example, so that bench/scaling can read either.
"""
import argparse
import gzip
import math
import os
import time

import numpy as np
import torch
import torch.distributed as dist
# Before init_process_group, on purpose: the functions of torch.distributed.nn take
# group.WORLD as a default argument, evaluated when the module is first imported. Imported
# after init (torch 2.6's DDP imports it, through torch._dynamo, when the model is
# wrapped) they would hold the default group for good, and destroy_process_group() at the
# end could not end it (step 6).
import torch.distributed.nn  # noqa: F401
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

DATA = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530


def read_idx(directory, name):
    """An IDX file of unsigned bytes, compressed or not, as a numpy array."""
    path = os.path.join(directory, name + ".gz")
    opener = gzip.open
    if not os.path.exists(path):
        path, opener = os.path.join(directory, name), open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 8:
        raise SystemExit(f"train_fashion.py: {path} is not an IDX file of unsigned bytes")
    ndims = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndims)]
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndims)
    if body.size != math.prod(dims):
        raise SystemExit(f"train_fashion.py: {path} is truncated: {body.size} of "
                         f"{math.prod(dims)} bytes")
    return body.reshape(dims)


def dataset(directory, split, limit):
    prefix = "train" if split == "train" else "t10k"
    try:
        images = read_idx(directory, f"{prefix}-images-idx3-ubyte")
        labels = read_idx(directory, f"{prefix}-labels-idx1-ubyte")
    except OSError as e:
        raise SystemExit(f"train_fashion.py: {e} (install Debian's dataset-fashion-mnist, "
                         "or pass --data DIR)")
    if limit:
        images, labels = images[:limit], labels[:limit]
    x = (torch.from_numpy(images.astype(np.float32)) / 255.0 - MEAN) / STD
    return TensorDataset(x.unsqueeze(1), torch.from_numpy(labels.astype(np.int64)))


class FashionCNN(nn.Module):
    """The course's model."""

    def __init__(self, dropout=0.25):
        super().__init__()
        self.layer1 = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32),
                                    nn.ReLU(), nn.MaxPool2d(2, 2))
        self.layer2 = nn.Sequential(nn.Conv2d(32, 64, 3), nn.BatchNorm2d(64), nn.ReLU(),
                                    nn.MaxPool2d(2))
        self.fc1 = nn.Linear(64 * 6 * 6, 600)
        self.drop = nn.Dropout(dropout)
        self.fc2 = nn.Linear(600, 120)
        self.fc3 = nn.Linear(120, 10)

    def forward(self, x):
        out = self.layer2(self.layer1(x)).flatten(1)
        return self.fc3(self.fc2(self.drop(self.fc1(out))))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(784, 256), nn.Linear(256, 128), nn.Linear(128, 10)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x.flatten(1))))))


def choose_device(requested, local_rank, local_world, cuda_available, gpus):
    """("cuda" or "cpu", a line to print or None) for --device on this node.

    auto takes the GPUs where every local rank has one of its own, else the CPU (with
    gloo), saying why; cuda without a GPU for every local rank is an error, named.
    """
    enough = cuda_available and gpus >= local_world
    if requested == "cpu" or (requested == "auto" and not cuda_available):
        return "cpu", None
    if enough:
        return "cuda", None
    if requested == "cuda":
        raise SystemExit(f"train_fashion: --device=cuda needs a GPU per worker: local rank "
                         f"{local_rank} of {local_world} workers, {gpus} GPU(s) visible "
                         f"(CUDA_VISIBLE_DEVICES)")
    return "cpu", (f"train_fashion: {local_world} workers on this node but {gpus} GPU(s): "
                   f"training on the CPU with gloo (--device=cuda needs a GPU per worker)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["cnn", "mlp"], default="cnn")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=64, help="per worker")
    parser.add_argument("--lr", type=float, default=None, help="0.02 cnn, 0.1 mlp")
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", default=DATA)
    parser.add_argument("--checkpoint", default=None)
    parser.add_argument("--log-every", type=int, default=100)
    parser.add_argument("--limit-train", type=int, default=0)
    parser.add_argument("--limit-test", type=int, default=0)
    parser.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto",
                        help="auto: the GPUs where every worker of a node has one, else the CPU")
    args = parser.parse_args()
    lr = args.lr if args.lr is not None else (0.1 if args.model == "mlp" else 0.02)

    # Step 1: join the job from the environment the launcher gives (RANK, WORLD_SIZE,
    # MASTER_ADDR, MASTER_PORT); one process alone without a launcher.
    for name, value in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0"),
                        ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29500")):
        os.environ.setdefault(name, value)
    local_rank = int(os.environ["LOCAL_RANK"])
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    available = torch.cuda.is_available()
    kind, why = choose_device(args.device, local_rank, local_world, available,
                              torch.cuda.device_count() if available else 0)
    cuda = kind == "cuda"
    if why is not None and local_rank == 0:
        print(why, flush=True)
    device = torch.device(f"cuda:{local_rank}" if cuda else "cpu")
    if cuda:
        # Each rank's NCCL work on its own GPU: without it, the calls that take no tensor
        # (barrier) run on the current device, cuda:0 for every rank (torch >= 2.4 warns).
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)

    train = dataset(args.data, "train", args.limit_train)
    test = dataset(args.data, "test", args.limit_test)
    # Step 2: each rank its share of each epoch.
    sampler = DistributedSampler(train, shuffle=True, seed=args.seed, drop_last=True)
    loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    # Step 3: the model, wrapped so that backward averages the gradients.
    model = (FashionCNN() if args.model == "cnn" else MLP()).to(device)
    model = DDP(model, device_ids=[device.index] if cuda else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=args.momentum)
    steps = len(loader)
    total = steps * args.epochs
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda t: 0.5 * (1 + math.cos(math.pi * t / total)))

    first_epoch = 0
    if args.checkpoint and os.path.exists(args.checkpoint):
        state = torch.load(args.checkpoint, map_location=device)
        model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        schedule.load_state_dict(state["schedule"])
        first_epoch = state["epoch"]
        if rank == 0:
            print(f"resumed from {args.checkpoint} at epoch {first_epoch + 1} "
                  f"(attempt {os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')})", flush=True)
    if rank == 0:
        name = "FashionCNN" if args.model == "cnn" else "MLP"
        print(f"training {name} on {len(train)} samples, {world} worker(s) x batch "
              f"{args.batch_size}, {steps} steps per epoch", flush=True)

    for epoch in range(first_epoch, args.epochs):
        sampler.set_epoch(epoch)  # a new shuffle each epoch, the same on every rank
        model.train()
        started, loss_sum, loss_steps = time.monotonic(), 0.0, 0
        for step, (x, y) in enumerate(loader):
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            schedule.step()
            loss_sum += loss.item()
            loss_steps += 1
            if (step + 1) % args.log_every == 0 or step + 1 == steps:
                # Step 4: the loss of every rank, reduced for the log line.
                mean = torch.tensor([loss_sum, float(loss_steps)], dtype=torch.float64,
                                    device=device)
                dist.all_reduce(mean)
                elapsed = time.monotonic() - started
                rate = (step + 1) * args.batch_size * world / elapsed
                eta = (steps - step - 1) * args.batch_size * world / rate
                if rank == 0:
                    print(f"epoch {epoch + 1}/{args.epochs} step {step + 1}/{steps} loss "
                          f"{(mean[0] / mean[1]).item():.4f} samples/s {rate:.0f} eta "
                          f"{int(eta) // 60}:{int(eta) % 60:02d}", flush=True)
                loss_sum, loss_steps = 0.0, 0
        took = time.monotonic() - started
        if rank == 0:
            print(f"epoch {epoch + 1}/{args.epochs} done in {took:.1f} s: "
                  f"{steps * args.batch_size * world / took:.0f} samples/s", flush=True)
        # Step 5: rank 0 saves; written aside and renamed, so a crash leaves the old one.
        if args.checkpoint and rank == 0:
            state = {"model": model.module.state_dict(), "optimizer": optimizer.state_dict(),
                     "schedule": schedule.state_dict(), "epoch": epoch + 1}
            torch.save(state, args.checkpoint + ".tmp")
            os.replace(args.checkpoint + ".tmp", args.checkpoint)
        if cuda:
            dist.barrier(device_ids=[local_rank])
        else:
            dist.barrier()

    # Test accuracy: each rank a strided share, the counts summed. The unwrapped model
    # (model.module) evaluates: the DDP wrapper's forward broadcasts buffers (batch norm's)
    # from rank 0, a collective that would wait forever for a rank whose share is empty.
    net = model.module
    net.eval()
    correct = torch.zeros(2, dtype=torch.int64, device=device)
    with torch.no_grad():
        xs, ys = test.tensors
        for start in range(rank * 1000, len(test), 1000 * world):
            x, y = xs[start:start + 1000].to(device), ys[start:start + 1000].to(device)
            correct[0] += (net(x).argmax(1) == y).sum()
            correct[1] += len(y)
    dist.all_reduce(correct)
    if rank == 0:
        print(f"test accuracy {100.0 * correct[0].item() / correct[1].item():.2f}%", flush=True)
    # Step 6: the end, in this order. The DDP wrapper holds the process group, so it goes
    # first; destroy_process_group() then really ends the group: gloo's worker threads are
    # joined here, while the last collective's tensor (correct) is still held by this
    # frame. A group left to outlive main() keeps a thread that may let go of that tensor
    # only after Python has begun to shut down (late, on a loaded machine); freeing it
    # then takes the GIL, which Python 3.13 answers by ending the thread (pthread_exit),
    # and the unwinding through torch's noexcept destructor aborts the worker: "terminate
    # called without an active exception" (torch 2.6, gloo).
    del model
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
