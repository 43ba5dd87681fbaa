"""The probe as a Hugging Face `transformers` TrainerCallback (the optional extra `minitrain[transformers]`):

    from minitrain.probe.hf import MinitrainCallback
    trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[MinitrainCallback("runs/hf")])

records the training into a minitrain run folder (options as `minitrain.probe.attach`). The Trainer gives
callbacks no point between backward and its own clipping, so the pre-clip gradient norms are read by
gradient hooks when the last gradient of the step's last backward arrives, before the Trainer clips (a
gradient your own `training_step` override changes after backward is therefore not seen). The loss is the
model's own `loss` output: the sum over gradient-accumulation micro-batches when the Trainer passes
`num_items_in_batch` (each is then a share of the step's mean), else their mean. The token ids are the
model's `input_ids`, padding dropped by the `attention_mask`. An evaluation's `eval_loss` is the next step's
`val_loss` (an evaluation after the last step is results.json's final_val_loss). The manifest's config
records the TrainingArguments that matter to the stability check (learning rate, warmup, clipping, batch size).
"""
from __future__ import annotations

import torch

try:
    from transformers import TrainerCallback
except ImportError as e:  # the optional extra is not installed
    raise ImportError("minitrain.probe.hf needs the transformers extra: pip install -e '.[transformers]'") from e

from minitrain.core.errors import UserError
from minitrain.probe import Probe


class MinitrainCallback(TrainerCallback):
    """Record a Trainer's training into the run folder `out` (refused when it holds a run, unless force=True)."""

    def __init__(self, out, **options):
        self.out, self.options = out, options
        self.probe: Probe | None = None
        self._val: float | None = None
        self._reset()

    def on_train_begin(self, args, state, control, model=None, optimizer=None, processing_class=None, **kwargs):
        config = {"lr_max": args.learning_rate, "warmup_steps": args.warmup_steps,
                  "grad_clip": args.max_grad_norm if args.max_grad_norm and args.max_grad_norm > 0 else None,
                  "weight_decay": args.weight_decay, "seed": args.seed, "steps": state.max_steps,
                  "batch_size": args.per_device_train_batch_size * args.gradient_accumulation_steps,
                  "lr_scheduler": str(getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type)),
                  "optimizer": str(getattr(args.optim, "value", args.optim))}
        options = {"tokenizer": processing_class, **self.options}
        options["config"] = {**config, **options.get("config", {})}
        self.probe = Probe(model, optimizer, self.out, grads_at="backward", source="transformers Trainer", **options)
        self.probe.keep(model.register_forward_pre_hook(self._inputs, with_kwargs=True))
        self.probe.keep(model.register_forward_hook(self._output))

    def _reset(self) -> None:
        """What one optimizer step collects (the validation loss waits for the next step: see on_evaluate)."""
        self._losses: list[torch.Tensor] = []
        self._ids: list[torch.Tensor] = []
        self._masks: list[torch.Tensor] = []
        self._summed = False

    def _inputs(self, module, args, kwargs):
        if not (module.training and torch.is_grad_enabled()):
            return
        ids = kwargs.get("input_ids", args[0] if args and torch.is_tensor(args[0]) else None)
        if ids is not None:
            mask = kwargs.get("attention_mask")
            self._ids.append(ids.detach())
            self._masks.append(mask.detach() if mask is not None else torch.ones_like(ids))
        self._summed = kwargs.get("num_items_in_batch") is not None

    def _output(self, module, args, output):
        loss = getattr(output, "loss", None)
        if loss is not None and module.training and torch.is_grad_enabled():
            self._losses.append(loss.detach().float())

    def on_step_begin(self, args, state, control, **kwargs):
        self._reset()

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        if self.probe is None:
            return
        if not self._losses:
            raise UserError("the model's output has no loss (the loss is computed outside the model); record this "
                            "training with minitrain.probe.attach in your own training step instead")
        losses = torch.stack(self._losses)
        self.probe.log(losses.sum() if self._summed else losses.mean(), self._ids or None,
                       attention_mask=self._masks or None, val_loss=self._val)
        self._val = None

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        """The Trainer evaluates after `global_step` updates, i.e. before the update of step `global_step`
        (0-based): that step's row carries it as val_loss, as minitrain's own runs measure it."""
        if self.probe is not None and not self.probe.closed and (metrics or {}).get("eval_loss") is not None:
            self._val = float(metrics["eval_loss"])

    def on_train_end(self, args, state, control, **kwargs):
        if self.probe is not None:
            self.probe.close(final_val_loss=self._val)  # an evaluation after the last step
