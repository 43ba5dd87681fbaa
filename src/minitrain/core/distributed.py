"""Where a run executes: the device (cpu | cuda), the precision (fp32 | bf16 autocast) and, under `torchrun`,
the process group of PyTorch's own DistributedDataParallel (gloo on CPU, nccl on GPU).

    torchrun --nproc_per_node 2 -m minitrain train --out experiments/ddp-run ...

`torch.distributed` is initialised only when torchrun's WORLD_SIZE is above 1; a single process never
touches it, so every helper below is the identity there and a one-process run is exactly what it was.

How a step is shared (see loop.train_step): every rank builds the same GLOBAL batch (a pure function of
the step, so no data is sent), applies the batch injection to it, and takes its contiguous share of the
rows (`local_rows`). Each rank's loss is its summed token loss divided by the global target-token count,
so the shares add up to the global token mean; DDP averages gradients over ranks, so the loss is
multiplied by the world size before backward (`backward_scale`). Gradients, parameters and optimizer state
are then the same on every rank. Only rank 0 writes the run folder.
"""
from __future__ import annotations

import atexit
import contextlib
import dataclasses
import os
from types import SimpleNamespace

import torch
import torch.distributed as dist

from minitrain.core.errors import UserError


# --- process group ---------------------------------------------------------------------------------


def env_world_size() -> int:
    """The world size torchrun announces (1 when not launched by torchrun)."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        raise UserError(f"WORLD_SIZE={os.environ['WORLD_SIZE']!r} is not an integer; launch with torchrun") from None


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


def setup(device: torch.device) -> None:
    """Join torchrun's process group once (no-op for a single process or when already joined)."""
    if env_world_size() <= 1 or dist.is_initialized():
        return
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        dist.init_process_group(backend, device_id=device)
    else:
        dist.init_process_group(backend)
    atexit.register(shutdown)


def shutdown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def is_main() -> bool:
    """Rank 0: the one process that writes the run folder and prints."""
    return rank() == 0


# --- device and precision --------------------------------------------------------------------------


def resolve_device(cfg) -> torch.device:
    """cfg.device (cpu | cuda | auto) as a torch.device; under torchrun each rank takes its LOCAL_RANK's GPU."""
    want = cfg.device
    if want == "auto":
        want = "cuda" if torch.cuda.is_available() else "cpu"
    if want == "cuda":
        if not torch.cuda.is_available():
            raise UserError("device=cuda but no CUDA GPU is visible to PyTorch; use --device cpu (or auto)")
        index = local_rank()
        if index >= torch.cuda.device_count():
            raise UserError(f"rank with LOCAL_RANK={index} has no GPU ({torch.cuda.device_count()} visible); "
                            "lower --nproc_per_node to the number of GPUs")
        torch.cuda.set_device(index)
        device = torch.device("cuda", index)
    else:
        device = torch.device("cpu")
    # bf16 autocast is a GPU option: on CPU it would be slow and change every number, so it is refused
    if cfg.precision == "bf16" and device.type != "cuda":
        raise UserError("precision=bf16 needs a CUDA device (this run resolved to cpu); "
                        "use precision=fp32 on CPU, or --device cuda")
    return device


def autocast(cfg, device: torch.device):
    """The forward pass's precision context: bf16 autocast on GPU when asked, otherwise nothing at all
    (weights, optimizer state and the loss stay fp32 either way)."""
    if cfg.precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


# --- the model and the batch -----------------------------------------------------------------------


def wrap_model(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """The module the training forward goes through: DDP around the model under torchrun, else the model.
    Parameter names (checkpoints, telemetry, injections) are always read from the bare model, so DDP's
    `module.` prefix never reaches a file."""
    if world_size() == 1:
        return model
    from torch.nn.parallel import DistributedDataParallel

    # the only buffers are the constant RoPE tables: no need to re-send them before every forward
    return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None,
                                   forward_sync_buffers=False)


def keep_local_gradients(ddp: torch.nn.Module) -> SimpleNamespace:
    """A DDP comm hook that all-reduces as DDP's own does (divide by the world size, sum) but, while the returned
    switch's `local` is True, hands this rank back its own gradient instead: it still joins every all-reduce, so
    no rank waits, but its replica steps on its own rows (the rank_desync injection)."""
    switch = SimpleNamespace(local=False)

    def hook(state, bucket):
        own = bucket.buffer()
        shared = own / world_size()
        done = dist.all_reduce(shared, async_op=True).get_future()
        keep = own.clone() if switch.local else None
        return done.then(lambda fut: keep if keep is not None else fut.value()[0])

    ddp.register_comm_hook(None, hook)
    return switch


def check_batch_size(batch_size: int) -> None:
    w = world_size()
    if batch_size % w:
        raise UserError(f"batch_size={batch_size} does not split over {w} processes; "
                        f"use a multiple of {w} (e.g. --set batch_size={batch_size - batch_size % w or w})")


def local_rows(batch):
    """This rank's contiguous share of the global batch (rows r*b .. (r+1)*b-1). The share keeps the global
    batch's width, so each rank's tensors are exactly slices of what one process would compute on."""
    w = world_size()
    if w == 1:
        return batch
    per = batch.x.shape[0] // w
    rows = slice(rank() * per, (rank() + 1) * per)
    return dataclasses.replace(batch, x=batch.x[rows], y=batch.y[rows], loss_mask=batch.loss_mask[rows],
                               key_pad=batch.key_pad[rows], irregular=batch.irregular[rows],
                               rows=batch.rows[rows])


def backward_scale() -> int:
    """DDP AVERAGES gradients over ranks, but each rank's loss is already its share of the global mean (the
    shares sum to it); multiplying by the world size turns DDP's average into that sum. We keep DDP's own
    bucketed all-reduce (overlapped with backward) rather than a no-sync manual all-reduce: it is the
    standard path, and for a power-of-two world size the scaling is exact in floating point."""
    return world_size()


# --- global reductions (all identity on one process) -----------------------------------------------


def all_reduce(t: torch.Tensor, op: str) -> torch.Tensor:
    """Sum, max or mean of `t` over ranks (a new tensor; `t` itself on one process)."""
    w = world_size()
    if w == 1:
        return t
    out = t.detach().clone()
    dist.all_reduce(out, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
    return out / w if op == "mean" else out


def gather(obj):
    """Every rank's `obj` (small, JSON-like), in rank order; `[obj]` on one process."""
    if world_size() == 1:
        return [obj]
    out = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out


def on_main(fn, *args, **kwargs):
    """Run fn on rank 0 only (e.g. creating the run folder) and make every rank raise its UserError, so a
    refusal on rank 0 cannot leave the other ranks waiting in the first collective."""
    error = None
    if is_main():
        try:
            fn(*args, **kwargs)
        except UserError as e:
            error = str(e)
    if world_size() > 1:
        box = [error]
        dist.broadcast_object_list(box, src=0)
        error = box[0]
    if error is not None:
        raise UserError(error)


def replicas_agree(model: torch.nn.Module) -> bool:
    """True when every rank holds bit-identical weights (sha256 of every tensor's bytes): what DDP,
    and injections applied on every rank, must guarantee."""
    if world_size() == 1:
        return True
    import hashlib

    digest = hashlib.sha256()
    for p in model.parameters():
        digest.update(p.detach().cpu().contiguous().numpy().tobytes())
    digests = gather(digest.hexdigest())
    return all(d == digests[0] for d in digests)
