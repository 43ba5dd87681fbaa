"""A Hugging Face Trainer run as its users write it: a small randomly initialised Llama on a word or byte
vocabulary, report_to="tensorboard", then save_model() and save_state(), so the output folder holds
config.json, trainer_state.json and runs/<date>_<host>/.

Knows nothing of minitrain. The Trainer logs every `logging_steps` steps: the loss averaged over the
interval, the learning rate and the last step's gradient norm (steps counted from 1). The data is a list of
pre-cut examples fed in order through an IterableDataset, so a fault lands at a known optimizer step; faults
are written the way they turn up: a data file with a corrupt stretch, a loader that repeats one batch, a
hand-built LambdaLR whose restart uses the wrong multiplier, a compute_loss override that scales the
gradient on one step (a loss scale never unscaled).
"""
import math

import torch
from torch.utils.data import IterableDataset
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

from text import byte_ids, reports, words


class Examples(IterableDataset):
    """The examples in the order given, one list per optimizer step's batch."""

    def __init__(self, batches):
        self.batches = batches

    def __iter__(self):
        for batch in self.batches:
            for ids in batch:
                yield {"input_ids": ids, "labels": ids}


def make_batches(ids, vocab_size, cfg):
    """max_steps batches of random windows, with the data fault (if any) at the batch it names."""
    gen = torch.Generator().manual_seed(cfg.get("seed", 0))
    T, B, fault = cfg["block_size"], cfg["batch_size"], cfg.get("fault", {})
    data = torch.tensor(ids)
    batches = []
    for step in range(cfg["max_steps"]):
        starts = torch.randint(len(data) - T, (B,), generator=gen).tolist()
        batch = [data[s:s + T] for s in starts]
        if fault.get("kind") == "bad_batch" and step == fault["batch"]:
            if fault.get("garbage"):
                batch = [torch.randint(vocab_size, (T,), generator=gen) for _ in range(B)]
            else:
                batch = [torch.full((T,), fault.get("token", 0)) for _ in range(B)]
        if fault.get("kind") == "stuck_loader" and fault["batch"] < step < fault["batch"] + fault["length"]:
            batch = batches[fault["batch"]]
        batches.append(batch)
    return batches


class ScaledTrainer(Trainer):
    """The user's subclass: a manual loss scale for one step whose gradients are never unscaled."""

    def __init__(self, *args, scale_at=-1, scale=1.0, **kwargs):
        super().__init__(*args, **kwargs)
        self.scale_at, self.scale = scale_at, scale

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss = super().compute_loss(model, inputs, return_outputs=return_outputs,
                                    num_items_in_batch=num_items_in_batch)
        if self.state.global_step == self.scale_at:
            value = loss[0] if return_outputs else loss
            value.register_hook(lambda g: g * self.scale)
        return loss


def restart_schedule(optimizer, cfg):
    """A hand-built linear-warmup LambdaLR with a warm restart whose multiplier is wrong for a few steps."""
    warmup, total, fault = cfg["warmup_steps"], cfg["max_steps"], cfg["fault"]

    def factor(step):
        f = (step + 1) / (warmup + 1) if step < warmup else max(0.0, (total - step) / max(1, total - warmup))
        if fault["batch"] <= step < fault["batch"] + fault["length"]:
            f *= fault["mult"]
        return f

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def train(out, cfg):
    torch.manual_seed(cfg.get("seed", 0))
    torch.set_num_threads(1)
    text = reports()
    if cfg["vocab"] == "bytes":
        ids, vocab_size = byte_ids(text), 256
    else:
        vocab, ids = words(text)
        vocab_size = len(vocab)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=vocab_size, hidden_size=cfg["hidden"], intermediate_size=2 * cfg["hidden"],
        num_hidden_layers=cfg["layers"], num_attention_heads=cfg["heads"], num_key_value_heads=cfg["heads"],
        max_position_embeddings=cfg["block_size"], tie_word_embeddings=cfg.get("tie", False)))
    args = TrainingArguments(
        output_dir=str(out), max_steps=cfg["max_steps"], per_device_train_batch_size=cfg["batch_size"],
        learning_rate=cfg["learning_rate"], lr_scheduler_type=cfg.get("scheduler", "linear"),
        warmup_steps=cfg.get("warmup_steps", 0), logging_steps=cfg["logging_steps"],
        max_grad_norm=cfg.get("max_grad_norm", 1.0), adam_beta2=cfg.get("adam_beta2", 0.999),
        weight_decay=cfg.get("weight_decay", 0.0), report_to=["tensorboard"], save_strategy="no",
        use_cpu=True, dataloader_num_workers=0, seed=cfg.get("seed", 0), disable_tqdm=True)
    fault = cfg.get("fault", {})
    optimizers = (None, None)
    if fault.get("kind") == "lr_spike":
        opt = torch.optim.AdamW(model.parameters(), lr=cfg["learning_rate"], betas=(0.9, args.adam_beta2),
                                weight_decay=args.weight_decay)
        optimizers = (opt, restart_schedule(opt, cfg))
    scale_at = fault["batch"] if fault.get("kind") == "gradient_explosion" else -1
    trainer = ScaledTrainer(model=model, args=args, train_dataset=Examples(make_batches(ids, vocab_size, cfg)),
                            optimizers=optimizers, scale_at=scale_at, scale=fault.get("scale", 1.0))
    trainer.train()
    trainer.save_model()
    trainer.save_state()
    return {"vocab_size": vocab_size, "steps": cfg["max_steps"]}
