"""The probe: minitrain's instruments on anyone's PyTorch training loop.

Two lines attach it to any `torch.nn.Module` and `torch.optim` optimizer:

    probe = attach(model, optimizer, "runs/my-run")   # once, before training
    ...
    loss.backward()
    probe.log(loss, input_ids)     # every step: after backward, before your clipping and optimizer.step()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()

It writes the run folder `minitrain train` writes (manifest.json, metrics.jsonl with the schema of
docs/metrics.md, optional safetensors checkpoints), so `minitrain dashboard`, `diagnose`, `index` and
`export` read it. Everything is measured at PyTorch's own hook points:

    model forward hooks        largest |logit| of the model's output; mean |activation| of each block's output
    probe.log(loss, ids)       the loss; the per-tensor gradient norms as they are at the call, i.e. after
                               whatever your code did to the gradients and before your clipping; the batch's
                               composition from its token ids
    optimizer step pre-hook    the learning rate (first param group), the global gradient norm after your
                               clipping, a copy of the weights
    optimizer step post-hook   update norms, Adam's second moment; the step's row is written here
    parameter gradient hooks   each gradient as backward produces it: were the gradients zeroed since the last
                               step (the optimizer got the fresh gradient plus the last step's: grads_carried),
                               and did the step change each tensor at all (unchanged), core/silent.py

The statistics are computed by minitrain's own `Telemetry` (core/telemetry.py: one `_foreach` pass per
statistic, one host transfer per step), so a probe row means exactly what a minitrain row means. What the
probe cannot see on a foreign model is left out of the rows and named in the manifest's `probe.absent`;
the walker marks the tree questions that read it "not measured" (docs/probe.md lists both).

The probe sits at the loop's layer (it records a training loop into a run folder), so it never draws:
`minitrain dashboard RUN` writes the page.
"""
from __future__ import annotations

import atexit
import math
import sys
import weakref
from pathlib import Path
from types import SimpleNamespace

import torch

from minitrain.core import distributed
from minitrain.core.errors import UserError
from minitrain.core.telemetry import RARE_SHARE, Telemetry, composition
from minitrain.run import files, record, sinks
from minitrain.run.nonfinite import non_finite_in
from minitrain.core.provenance import now_iso
from minitrain.run.provenance import environment


class Probe:
    """Live instruments on one model + optimizer, writing one run folder. Made by `attach`."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, out, *, force: bool = False,
                 blocks=None, pad_id: int | None = None, token_counts=None, tokenizer=None,
                 config: dict | None = None, telemetry: str = "full", spectral_every: int = 0, ckpt_every: int = 0,
                 grads_at: str = "log", source: str = "pytorch loop", log: str = "jsonl"):
        opt = getattr(optimizer, "optimizer", optimizer)  # accelerate (the HF Trainer) wraps the torch optimizer
        if not isinstance(model, torch.nn.Module):
            raise UserError(f"attach() needs a torch.nn.Module, got {type(model).__name__}")
        if not isinstance(opt, torch.optim.Optimizer):
            raise UserError(f"attach() needs a torch.optim optimizer, got {type(optimizer).__name__}")
        if grads_at not in ("log", "backward"):
            raise UserError(f"grads_at must be 'log' or 'backward', not {grads_at!r}")
        if telemetry not in ("full", "basic"):
            raise UserError(f"telemetry must be 'full' or 'basic', not {telemetry!r}")
        log_to = sinks.parse_log(log)
        sinks.check_installed(log_to)
        if distributed.world_size() > 1:
            raise UserError("the probe records one process; under torch.distributed it is not supported yet")
        self.model, self.opt, self.out = model, opt, Path(out)
        self.grads_at, self.pad_id, self.ckpt_every = grads_at, pad_id, int(ckpt_every)
        self.named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        if not self.named:
            raise UserError("the model has no trainable parameters; nothing to measure")
        self.params = [p for _, p in self.named]
        self.device = self.params[0].device
        group = opt.param_groups[0]
        self.adam = "betas" in group and "eps" in group  # Adam family: exp_avg_sq in the state after a step
        self.full = self.adam and telemetry == "full"  # per-tensor statistics
        if self.ckpt_every and not self.adam:
            raise UserError(f"checkpoints hold Adam's moments; {type(opt).__name__} has none, so leave ckpt_every "
                            "at 0 (or use an Adam-family optimizer)")
        self.blocks = _find_blocks(model) if blocks is None else list(blocks)
        # Telemetry reads a model's named_parameters (here: the trainable ones) and its last_activations
        # (here: what the block hooks measured this step)
        self.view = SimpleNamespace(named_parameters=lambda: iter(self.named), last_activations=[])
        self.tcfg = SimpleNamespace(telemetry="full" if self.full else "basic", spectral_every=int(spectral_every),
                                    beta2=group["betas"][1] if self.adam else None, eps=group.get("eps"),
                                    grad_clip=math.inf)  # set every step to the clipped norm measured
        self.tel = Telemetry(self.view, opt, self.tcfg, torch.zeros(1, dtype=torch.bool))
        # the rare-token reference: the training split's counts when given, else the tokens seen so far
        self.given_counts = token_counts is not None
        self.counts = torch.zeros(0, dtype=torch.float64)
        self.rare: list[bool] = []
        if token_counts is not None:
            counts = torch.as_tensor(token_counts).flatten().to(torch.float64)
            self.rare = (counts < RARE_SHARE * counts.sum()).tolist()
        self.step, self.closed, self.status = 0, False, "running"
        self.vocab_size: int | None = None
        self.batch_size: int | None = None
        self.absent: dict[str, str] = {}
        self.non_finite: dict | None = None  # {step, what} of the first non-finite value (run/nonfinite.py)
        self.last: dict = {}
        self.last_val: float | None = None
        self.results: dict = {}
        self._handles: list = []
        self._reset_step()
        self._open_folder(force, tokenizer, config or {}, source)  # everything is checked before this
        self.sinks = sinks.open_sinks(",".join(log_to), self.out, self.config)  # run/sinks.py
        self._register()
        atexit.register(_close_at_exit, weakref.ref(self))

    def _reset_step(self) -> None:
        """What one step collects, filled by the hooks and log(); the row is written when it is complete."""
        self._acts: list[torch.Tensor] = []
        self._logit_max: torch.Tensor | None = None
        self._loss: torch.Tensor | None = None
        self._ids: list[tuple[int, ...]] | None = None
        self._val: float | None = None
        self._grad_norm: torch.Tensor | None = None  # pre-clip global norm
        self._clipped_norm: torch.Tensor | None = None  # global norm the optimizer got
        self._lr: float | None = None
        self._measured: dict | None = None  # the row but its loss, once the optimizer has stepped
        self._logged = False

    # --- the run folder ---
    def _open_folder(self, force: bool, tokenizer, config: dict, source: str) -> None:
        env = environment(self.params[0].device)  # its subprocesses run before the lock is taken (files.RunLock)
        self.lock = files.claim_run_dir(self.out, force)  # held while this process records the run
        tok = getattr(tokenizer, "backend_tokenizer", tokenizer)  # a transformers fast tokenizer wraps one
        if tok is not None and hasattr(tok, "to_str") and hasattr(tok, "get_vocab_size"):  # a tokenizers.Tokenizer
            files.atomic_write_text(self.out / "tokenizer.json", tok.to_str())
            self.vocab_size = tok.get_vocab_size()
        self.config = {"injection": "none", **config}
        self.source = {"kind": source, "model": type(self.model).__name__, "optimizer": type(self.opt).__name__,
                       "trainable_tensors": len(self.params),
                       "trainable_parameters": sum(p.numel() for p in self.params),
                       "blocks": len(self.blocks), "grads_measured_at": self.grads_at,
                       "rare_reference": "given token counts" if self.given_counts else "tokens seen so far"}
        self.metrics = files.MetricsWriter(self.out / "metrics.jsonl")
        self._write_manifest(**env)

    def _write_manifest(self, **extra) -> None:
        cfg = dict(self.config)
        for key, value in (("vocab_size", self.vocab_size), ("batch_size", self.batch_size)):
            if value is not None:
                cfg.setdefault(key, value)
        record.write_manifest(self.out, self.status, {
            "seed": cfg.get("seed"), "config": cfg, "injection": {"injection": "none"},
            "probe": {**self.source, "absent": dict(self.absent)}, **extra})

    def _register(self) -> None:
        self.keep(self.model.register_forward_hook(self._on_output))
        for i, block in enumerate(self.blocks):
            self.keep(block.register_forward_hook(self._on_block(i)))
        self.keep(self.opt.register_step_pre_hook(self._before_step))
        self.keep(self.opt.register_step_post_hook(self._after_step))
        for i, p in enumerate(self.params):  # the gradient as backward produces it, before it reaches .grad
            self.keep(p.register_hook(self._on_fresh_grad(i)))
        if self.grads_at == "backward":
            self._fired: set[int] = set()
            for i, p in enumerate(self.params):
                self.keep(p.register_post_accumulate_grad_hook(self._on_grad(i)))

    def keep(self, handle) -> None:
        """Remove this hook handle when the probe closes (integrations register hooks of their own)."""
        self._handles.append(handle)

    # --- hooks ---
    def _training(self, module) -> bool:
        return module.training and torch.is_grad_enabled() and not self.closed

    def _on_block(self, i: int):
        def hook(module, args, output):
            h = _first_tensor(output)
            if h is not None and self._training(module):
                if i == 0:  # a new forward (gradient accumulation: the last micro-batch's forward counts)
                    self._acts = []
                self._acts.append(h.detach().abs().mean().float())
        return hook

    def _on_output(self, module, args, output):
        logits = _logits(output)
        if logits is not None and self._training(module):
            lo, hi = torch.aminmax(logits.detach())  # max |logit| without a copy of |logits|
            self._logit_max = torch.maximum(hi, -lo).float().reshape(1)
            if self.vocab_size is None:
                self.vocab_size = int(logits.shape[-1])

    def _on_fresh_grad(self, i: int):
        def hook(grad):
            if not self.closed:  # were the gradients zeroed since the last step (core/silent.py's carried)
                self.tel.silent.add_produced(i, grad)
        return hook

    def _on_grad(self, i: int):
        def hook(p):
            self._fired.add(i)
            if len(self._fired) == len(self.params):  # the last gradient of this backward has arrived
                self._fired = set()
                self._capture_grads()
        return hook

    def _grads(self) -> list[torch.Tensor]:
        return [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]

    def _capture_grads(self) -> None:
        """Per-tensor gradient norms now (before the user's clipping), and their global norm."""
        grads = self._grads()
        self.tel.after_backward(grads)  # per-tensor norms (full telemetry)
        norms = self.tel.grad_norms if self.full else torch.stack(torch._foreach_norm(grads))
        self._grad_norm = torch.linalg.vector_norm(norms.float())

    def log(self, loss, input_ids=None, *, attention_mask=None, val_loss: float | None = None) -> None:
        """This step's training loss and, optionally, its token ids (a [batch, time] tensor, or a list of them
        for gradient-accumulation micro-batches; padding dropped by `attention_mask`, else by `pad_id`) and a
        validation loss measured before this step's update. With grads_at='log' (the default) call it after
        backward and before clipping: the gradient norms it measures are the run's pre-clip norms."""
        if self.closed:
            raise UserError("this probe is closed; attach a new one to record another run")
        if self.grads_at == "log":
            if self._logged:
                raise UserError("probe.log() was called twice without an optimizer step in between; call it once "
                                "per step, after loss.backward() and before optimizer.step() (a GradScaler that "
                                "skips optimizer.step() is not supported yet)")
            if all(p.grad is None for p in self.params):
                raise UserError("probe.log(loss) found no gradients: call it after loss.backward() (and before "
                                "clipping and optimizer.step())")
            self._capture_grads()
        self._loss = (loss.detach().float().reshape(()) if torch.is_tensor(loss)
                      else torch.tensor(float(loss))).to(self.device)
        self._ids = _token_rows(input_ids, attention_mask, self.pad_id)
        self._val = None if val_loss is None else float(val_loss)
        self._logged = True
        if self._measured is not None:  # grads_at='backward' and the optimizer already stepped
            self._write_row()

    def _before_step(self, opt, args, kwargs) -> None:
        if self.closed:
            return
        if self.grads_at == "log" and not self._logged:
            self.close()
            raise UserError(f"probe.log(loss) must come after loss.backward() and before clipping and "
                            f"optimizer.step(); step {self.step} stepped without it (the run so far is kept)")
        if self._grad_norm is None:  # grads_at='backward' but no complete backward was seen this step
            self._capture_grads()
            self.absent["pre_clip_norm"] = "at some steps the gradients were first read at optimizer.step()"
        self._clipped_norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(self._grads())).float())
        self._lr = float(opt.param_groups[0]["lr"])
        self.tel.before_step()

    def _after_step(self, opt, args, kwargs) -> None:
        if self.closed:
            return
        self.tel.after_step(self._lr)
        self._measured = self._measure()
        if self._logged:
            self._write_row()

    # --- one row ---
    def _measure(self) -> dict:
        """Everything of the step's row but the loss, taken while the gradients and the optimizer's state are
        this step's (right after optimizer.step()); with grads_at='backward' the loss may come later."""
        gn = self._grad_norm
        loss = self._loss if self._logged else torch.zeros((), device=self.device)  # the real one comes later
        gn_f, post_f = torch.stack([gn, self._clipped_norm]).tolist()
        # Telemetry's detail trigger rebuilds the clipped gradient as g * min(1, grad_clip / norm); your loop's
        # clip threshold is unknown here, the clipped norm it produced is measured: the same coefficient
        self.tcfg.grad_clip = post_f
        self.view.last_activations = self._acts
        logits = self._logit_max if self._logit_max is not None else torch.full((1,), math.nan, device=self.device)
        measured = {"lr": self._lr, "grad_norm": _finite(gn_f), "grad_norm_clipped": _finite(post_f),
                    "clipped": bool(math.isfinite(gn_f) and post_f < gn_f), "loss_counted": self._logged,
                    **self.tel.row(self.step, None, logits, loss, gn)}
        if self._logit_max is None:
            del measured["logit_max"]
            self.absent["logit_max"] = "the model's output holds no logits tensor"
        if not self.blocks:
            del measured["act"]
            self.absent["act"] = "no list of blocks found (pass blocks=[...] to attach)"
        if not self.full:
            self.absent["params"] = (f"{type(self.opt).__name__} keeps no Adam second moment" if not self.adam
                                     else "telemetry='basic' (no per-tensor statistics)")
        return measured

    def _write_row(self) -> None:
        step, measured = self.step, self._measured
        loss_f = float(self._loss)
        if not measured.pop("loss_counted") and not math.isfinite(loss_f):
            measured["nonfinite"] += 1  # non-finite values in the loss and the gradients (docs/metrics.md)
        row = {"step": step, "loss": _finite(loss_f)}
        for key in ("lr", "grad_norm", "grad_norm_clipped", "clipped"):
            row[key] = measured.pop(key)
        row["val_loss"] = _finite(self._val)
        row["injected"] = None  # the probe injects nothing; faults in the user's own code are not injections
        row.update(measured)
        batch = self._composition()
        if batch is None:
            self.absent["batch"] = "no token ids were passed to probe.log()"
        else:
            row["batch"] = batch
        self.metrics.write(row)
        self.sinks.write(row)
        self.last = row
        self.last_val = row["val_loss"] if row["val_loss"] is not None else self.last_val
        first = step == 0
        if self.batch_size is None and batch is not None:
            self.batch_size = len(batch["rows"])
        what = non_finite_in(row) if self.non_finite is None else None
        if what:  # recorded, not stopped: the probe does not own the loop
            self.non_finite, self.status = {"step": step, "what": what}, "non_finite"
            first = True
        self.step += 1
        if first:  # the manifest learns what step 0 revealed (vocabulary, batch size, absent signals)
            self._write_manifest()
        if self.ckpt_every and self.step % self.ckpt_every == 0:
            files.save_checkpoint(self.out, self.step, self.model, self.opt,
                                  {"metrics_bytes": self.metrics.tell(), "metrics_sha256": self.metrics.digest(),
                                   "recorded_by": "probe"})
        self._reset_step()

    def _composition(self) -> dict | None:
        """The batch's composition as minitrain's rows carry it (`rows`, indices into a training split, are
        unknown here: null), against the rare-token reference: the given training-split counts, or else
        the tokens of the batches seen before this one."""
        seqs = self._ids
        if seqs is None:
            return None
        ids = torch.tensor([t for s in seqs for t in s], dtype=torch.long)  # a few hundred tokens
        top = int(ids.max()) + 1 if len(ids) else 0
        if not self.given_counts:
            if top > len(self.counts):
                self.counts = torch.cat([self.counts, torch.zeros(top - len(self.counts), dtype=torch.float64)])
            self.rare = (self.counts < RARE_SHARE * self.counts.sum()).tolist()
            self.counts += torch.bincount(ids, minlength=len(self.counts)).to(torch.float64)
        if top > len(self.rare):  # ids past the reference's vocabulary were never seen: rare
            self.rare = self.rare + [True] * (top - len(self.rare))
        return composition(seqs, [None] * len(seqs), self.rare)

    # --- the end ---
    def close(self, final_val_loss: float | None = None, error: BaseException | None = None) -> dict:
        """Finish the run folder (results.json, the manifest's status and end time). Called by `with`, by
        the Trainer callback at the end of training, and at interpreter exit if you forget.
        `final_val_loss`: a validation loss measured after the last step (default: the last one logged).
        `error`: the exception that ended the training loop, if one did: the run is then recorded `failed`
        (`interrupted` for Ctrl-C) with the error's one line, never `finished`."""
        if self.closed:
            return self.results
        self.closed = True
        for h in self._handles:
            h.remove()
        self.metrics.close()
        self.sinks.close()
        ending = _ending(error)
        if self.status == "running":
            self.status = ending[0] if ending else "finished"
        val = final_val_loss if final_val_loss is not None else self.last_val
        self.results = record.results(self.status, self.step, self.last.get("loss"), val, non_finite=self.non_finite)
        extra = {"error": f"{ending[1]} (during step {self.step})"} if ending else {}
        record.write_results(self.out, {**self.results, **extra})
        self._write_manifest(ended=now_iso(), **extra)
        self.lock.release()
        what = f"{self.status}: {extra['error']}; " if ending else ""
        print(f"minitrain probe: {what}{self.step} steps recorded in {self.out}; see 'minitrain dashboard "
              f"{self.out}' and 'minitrain diagnose {self.out}'", file=sys.stderr)
        return self.results

    def __enter__(self) -> "Probe":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(error=exc)  # the exception, if any, still propagates


def attach(model: torch.nn.Module, optimizer: torch.optim.Optimizer, out, **options) -> Probe:
    """Instrument `model` and `optimizer` and record the training into the run folder `out` (refused when
    it already holds a run, unless force=True). Then call `probe.log(loss, input_ids)` every step between
    backward and clipping, and `probe.close()` at the end (or use `with attach(...) as probe:`).

    Options: blocks (the modules whose outputs are the layers' activations; default: the model's longest
    ModuleList, e.g. GPT-2's transformer.h), pad_id (padding in input_ids when no attention_mask is given),
    token_counts (the training split's count per token id, the reference of the rare-token share; default:
    the tokens seen so far), tokenizer (a `tokenizers.Tokenizer` or transformers fast tokenizer, saved as
    tokenizer.json), config (your hyperparameters, recorded in the manifest), telemetry ('full': per-tensor
    statistics on minitrain's schedule, as its own runs; 'basic': global signals only), spectral_every (largest singular
    value of each matrix every N steps; 0 = never), ckpt_every (safetensors checkpoints every N steps),
    grads_at ('log': gradient norms measured at probe.log; 'backward': when the last gradient of a backward
    arrives, for loops that cannot call log() before clipping), log (sinks besides metrics.jsonl, e.g.
    "tensorboard,mlflow": run/sinks.py)."""
    return Probe(model, optimizer, out, **options)


# --- reading a foreign model's outputs -------------------------------------------------------------


def _first_tensor(x):
    """The main tensor of a module's output: itself, a tuple's first element, or `last_hidden_state`."""
    if torch.is_tensor(x):
        return x
    if isinstance(x, (tuple, list)) and x and torch.is_tensor(x[0]):
        return x[0]
    h = getattr(x, "last_hidden_state", None)
    return h if torch.is_tensor(h) else None


def _logits(output):
    """The logits of a model's output: a `.logits` field (transformers), a 'logits' key, the first tensor
    of a tuple, or the output itself; a float tensor of rank >= 2, else None."""
    x = getattr(output, "logits", None)
    if x is None and isinstance(output, dict):
        x = output.get("logits")
    if x is None:
        x = _first_tensor(output)
    return x if torch.is_tensor(x) and x.is_floating_point() and x.dim() >= 2 else None


def _find_blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's longest ModuleList: its transformer blocks (GPT-2's `transformer.h`, Llama's
    `model.layers`, minitrain's own `blocks`)."""
    lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList)]
    return list(max(lists, key=len)) if lists else []


def _token_rows(ids, mask, pad_id) -> list[tuple[int, ...]] | None:
    """Rows of token ids without padding: by `mask` when given, else by `pad_id`. `ids` may be a list of
    [batch, time] tensors (gradient-accumulation micro-batches) with a list of masks."""
    if ids is None:
        return None
    if isinstance(ids, (list, tuple)) and ids and torch.is_tensor(ids[0]):
        masks = mask if mask is not None else [None] * len(ids)
        return [row for i, m in zip(ids, masks) for row in _token_rows(i, m, pad_id)]
    ids = torch.as_tensor(ids).detach().cpu()
    ids = ids.unsqueeze(0) if ids.dim() == 1 else ids
    keep = (torch.as_tensor(mask).detach().cpu().bool().reshape(ids.shape) if mask is not None
            else ids != pad_id if pad_id is not None else None)
    if keep is None:
        return [tuple(r) for r in ids.tolist()]
    return [tuple(r[k].tolist()) for r, k in zip(ids, keep)]


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _ending(error: BaseException | None) -> tuple[str, str] | None:
    """(status, the error's one line) of a loop that ended on ERROR; None when it ended normally."""
    if error is None or isinstance(error, SystemExit) and error.code in (0, None):
        return None
    first = str(error).strip().splitlines()[0][:200] if str(error).strip() else ""
    line = type(error).__name__ + (f": {first}" if first else "")
    return ("interrupted" if isinstance(error, KeyboardInterrupt) else "failed"), line


def _close_at_exit(ref) -> None:
    probe = ref()
    if probe is not None and not probe.closed:
        # an interpreter that exits on an unhandled exception has set sys.last_value before atexit runs
        probe.close(error=getattr(sys, "last_value", None))


__all__ = ["Probe", "attach"]
