"""A plain torchrun-style PyTorch DDP training script, for ftdrive or torchrun alike.

Every worker reads the standard environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
MASTER_PORT; FTDRIVE_CYCLE, else TORCHELASTIC_RESTART_COUNT + 1 under torchrun) and joins `init_process_group("env://")`: gloo on CPU,
nccl when the worker sees a GPU. The model learns a known linear map from synthetic data, each
rank drawing its own shard of every batch, so the result can be checked: at the end every rank
holds the same weights (DDP kept them in step) and they are close to the true map.

Rank 0 checkpoints (model, optimizer, step) after every step, atomically, in a directory every
node shares. A re-formed gang (any cycle after the first: after a failure, a lost node or a
change of size) resumes from it on every rank
(the optimizer's momentum is state too), whatever its new world size; the first cycle of a job
starts from scratch.

Exit codes: 0 trained and checked, 1 a peer or the rendezvous failed (the runtime restarts the
gang), 2 bad arguments, checkpoint or GPUs (fewer visible than workers on the node), 3 the
weights are wrong.
"""

import argparse
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel

FEATURES = 16
BATCH_PER_RANK = 64


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=100, help="optimizer steps in total (default 100)")
    parser.add_argument("--step-seconds", type=float, default=0.0, help="extra sleep per step, to watch it (default 0)")
    parser.add_argument("--lr", type=float, default=0.05, help="learning rate (default 0.05)")
    parser.add_argument(
        "--checkpoint-dir",
        default=None,
        help="where rank 0 keeps the checkpoint; must be shared by all nodes "
        "(default $TMPDIR/ftdrive-ddp/$TORCHELASTIC_RUN_ID)",
    )
    args = parser.parse_args(argv)
    if args.steps < 1 or args.step_seconds < 0 or args.lr <= 0:
        parser.error("--steps must be >= 1, --step-seconds >= 0 and --lr > 0")
    return args


def env_int(name, default):
    text = os.environ.get(name, "")
    if text == "":
        return default
    try:
        return int(text)
    except ValueError:
        raise SystemExit(f"environment variable {name}={text!r} is not an integer") from None


class Worker:
    """Who this process is, for log lines."""

    def __init__(self):
        self.rank = env_int("RANK", 0)
        self.world = env_int("WORLD_SIZE", 1)
        self.local_rank = env_int("LOCAL_RANK", 0)
        # ftdrive numbers every cycle; torchrun's restart count leaves out membership changes.
        self.cycle = env_int("FTDRIVE_CYCLE", env_int("TORCHELASTIC_RESTART_COUNT", 0) + 1)

    def log(self, message):
        print(f"rank {self.rank}/{self.world} (local {self.local_rank}) cycle {self.cycle}: {message}", flush=True)


class TooFewGpus(Exception):
    """The node runs more workers than it has GPUs: the bundle or nproc_per_node must change."""


def gpu_index(local_rank, local_world, visible):
    """The GPU this worker trains on: one of its own. NCCL cannot put two ranks on one device
    (it fails the whole gang with "Duplicate GPU detected"), so a node with fewer GPUs than
    workers is refused here, before the rendezvous, saying what to change."""
    workers = max(local_world, local_rank + 1)
    if workers > visible:
        raise TooFewGpus(
            f"{workers} workers on this node but {visible} GPU(s) visible to them "
            f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')!r}); NCCL needs "
            f'a GPU per worker: ask for "bundle": {{"gpu": {workers}}}, or set nproc_per_node to {visible}'
        )
    return local_rank


def checkpoint_path(args):
    base = args.checkpoint_dir or os.path.join(
        os.environ.get("TMPDIR", "/tmp"), "ftdrive-ddp", os.environ.get("TORCHELASTIC_RUN_ID", "local")
    )
    os.makedirs(base, exist_ok=True)
    return os.path.join(base, "checkpoint.pt")


def save(path, model, optimizer, step):
    """Writes atomically: a crash leaves the old checkpoint or the new one, never half of one."""
    fd, tmp = tempfile.mkstemp(prefix=".checkpoint.", suffix=".tmp", dir=os.path.dirname(path))
    with os.fdopen(fd, "wb") as f:
        torch.save({"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict()}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def resume(path, model, optimizer, me):
    """Loads the checkpoint of an earlier cycle; returns the last step it holds. Every rank
    loads it before the first collective, so none can see a newer one than another."""
    if me.cycle == 1 or not os.path.exists(path):
        return 0
    try:
        state = torch.load(path, map_location="cpu")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        return int(state["step"])
    except Exception as err:  # a checkpoint that cannot be used is the user's to fix
        me.log(f"checkpoint {path} is unusable ({err}); fix or delete it")
        sys.exit(2)


def true_map():
    g = torch.Generator().manual_seed(1234)
    return torch.randn(FEATURES, 1, generator=g)


def batch(step, rank, target):
    """This rank's shard of the step's batch: the same data whoever runs it."""
    g = torch.Generator().manual_seed(step * 100_003 + rank)
    x = torch.randn(BATCH_PER_RANK, FEATURES, generator=g)
    return x, x @ target


def agree_on_start(step, me, device):
    """Everyone resumed from the same step, or the checkpoint directory is not shared."""
    t = torch.tensor([step], dtype=torch.long, device=device)
    dist.broadcast(t, src=0)
    if int(t.item()) != step:
        me.log(f"resumed at step {step} but rank 0 at {int(t.item())}: is the checkpoint directory shared?")
        sys.exit(2)
    return step


def check_weights(model, target, me, device):
    """Every rank holds the same weights, close to the true map."""
    weights = model.module.weight.detach().reshape(-1)
    lowest, highest = weights.clone(), weights.clone()
    dist.all_reduce(lowest, op=dist.ReduceOp.MIN)
    dist.all_reduce(highest, op=dist.ReduceOp.MAX)
    spread = float((highest - lowest).abs().max())
    error = float((weights.cpu() - target.reshape(-1)).abs().max())
    me.log(f"weights: spread across ranks {spread:.2e}, largest error {error:.4f}")
    return spread < 1e-5 and error < 0.05


def main(argv):
    args = parse_args(argv)
    me = Worker()
    use_cuda = torch.cuda.is_available()
    device = torch.device("cpu")
    if use_cuda:
        try:
            local_world = env_int("LOCAL_WORLD_SIZE", 1)
            device = torch.device("cuda", gpu_index(me.local_rank, local_world, torch.cuda.device_count()))
        except TooFewGpus as err:
            me.log(str(err))
            return 2
        torch.cuda.set_device(device)
    dist.init_process_group(backend="nccl" if use_cuda else "gloo", init_method="env://")
    me.log(f"joined the group ({dist.get_backend()}, device {device}, CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')})")

    model = nn.Linear(FEATURES, 1, bias=False).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    path = checkpoint_path(args)
    done = agree_on_start(resume(path, model, optimizer, me), me, device)
    # DDP broadcasts rank 0's weights to every rank as it wraps the model.
    ddp = DistributedDataParallel(model, device_ids=[device.index] if use_cuda else None)
    if done:
        me.log(f"resumed from the checkpoint at step {done}")
    target = true_map()
    for step in range(done + 1, args.steps + 1):
        x, y = batch(step, me.rank, target)
        loss = nn.functional.mse_loss(ddp(x.to(device)), y.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if me.rank == 0:
            save(path, model, optimizer, step)
        if step % 10 == 0 or step == args.steps:
            me.log(f"step {step}/{args.steps} loss {loss.item():.5f}")
        time.sleep(args.step_seconds)

    ok = check_weights(ddp, target, me, device)
    dist.destroy_process_group()
    if not ok:
        me.log("the trained weights are wrong")
        return 3
    me.log(f"done: {args.steps} steps")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except (RuntimeError, dist.DistBackendError) as err:
        # A peer went away or the rendezvous failed: the runtime restarts the gang.
        print(f"rank {os.environ.get('RANK', '0')}: distributed failure: {err}", file=sys.stderr, flush=True)
        sys.exit(1)
