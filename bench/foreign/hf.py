"""A Hugging Face Trainer run as its users write it: a small randomly initialised GPT-2, report_to="tensorboard",
then save_model() and save_state() so the output folder holds config.json and trainer_state.json.

Knows nothing of minitrain. The data is a streaming IterableDataset (the Trainer keeps its order, so a fault in
the stream lands at a known step); faults are written the way they turn up: a corrupted stretch of the stream,
a stream that repeats itself, a hand-built LambdaLR with a bad restart, a gradient hook left on for one step.
"""
import math
from pathlib import Path

import torch
from torch.utils.data import IterableDataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

from corpus import make_text, word_ids, word_vocab


class TextStream(IterableDataset):
    """Endless random windows of the corpus, with the fault (if any) at the batch it names."""

    def __init__(self, ids, block_size, batch_size, vocab_size, fault, seed):
        self.ids, self.block_size, self.batch_size = ids, block_size, batch_size
        self.vocab_size, self.fault, self.seed = vocab_size, fault, seed

    def __iter__(self):
        gen = torch.Generator().manual_seed(self.seed)
        kind, k = self.fault.get("kind"), self.fault.get("batch", -1)
        replay = []
        i = 0
        while True:
            batch = i // self.batch_size
            start = torch.randint(len(self.ids) - self.block_size, (1,), generator=gen).item()
            window = self.ids[start:start + self.block_size]
            if kind == "bad_batch" and batch == k:
                if self.fault.get("garbage"):
                    window = torch.randint(self.vocab_size, (self.block_size,), generator=gen)
                else:
                    window = torch.full((self.block_size,), self.fault.get("token", 0))
            if kind == "stuck_loader" and k <= batch < k + self.fault["length"]:
                if batch == k:
                    replay.append(window)  # the shard reader keeps re-reading one chunk
                else:
                    window = replay[i % self.batch_size]
            i += 1
            yield {"input_ids": window, "labels": window.clone()}


class ScaleGradOnce(TrainerCallback):
    """A gradient hook (meant for debugging) that multiplies every gradient at one step."""

    def __init__(self, step, factor):
        self.step, self.factor = step, factor

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        for p in model.parameters():
            p.register_hook(lambda g: g * self.factor if state.global_step == self.step else g)


def train(out_dir, cfg):
    out_dir = Path(out_dir)
    torch.manual_seed(cfg.get("seed", 42))
    torch.set_num_threads(1)
    text = make_text(seed=cfg.get("data_seed", 0))
    vocab = word_vocab(text)
    ids = torch.tensor(word_ids(text, vocab), dtype=torch.long)
    block_size, batch_size = cfg.get("block_size", 32), cfg.get("batch_size", 16)
    config = GPT2Config(vocab_size=len(vocab), n_positions=block_size, n_embd=cfg.get("n_embd", 48),
                        n_layer=2, n_head=4, bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config)
    fault = cfg.get("fault", {})
    dataset = TextStream(ids, block_size, batch_size, len(vocab), fault, cfg.get("seed", 42))
    max_steps = cfg.get("max_steps", 300)
    args = TrainingArguments(
        output_dir=str(out_dir),
        max_steps=max_steps,
        per_device_train_batch_size=batch_size,
        learning_rate=cfg.get("learning_rate", 5e-5),
        warmup_steps=cfg.get("warmup_steps", 0),
        lr_scheduler_type=cfg.get("lr_scheduler_type", "linear"),
        max_grad_norm=cfg.get("max_grad_norm", 1.0),
        weight_decay=cfg.get("weight_decay", 0.0),
        logging_steps=cfg.get("logging_steps", 10),
        report_to="tensorboard",
        save_strategy="no",
        use_cpu=True,
        seed=cfg.get("seed", 42),
        disable_tqdm=True,
    )
    optimizers = (None, None)
    if fault.get("kind") == "lr_spike":
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, weight_decay=args.weight_decay)
        warmup, k, length, factor = args.warmup_steps, fault["batch"], fault.get("length", 3), fault["factor"]

        def lr_lambda(step):
            scale = (step + 1) / warmup if step < warmup else max(0.0, (max_steps - step) / (max_steps - warmup))
            return scale * factor if k <= step < k + length else scale  # restart with the wrong multiplier

        optimizers = (optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda))
    callbacks = [ScaleGradOnce(fault["batch"], fault["factor"])] if fault.get("kind") == "grad_scale" else []
    trainer = Trainer(model=model, args=args, train_dataset=dataset, optimizers=optimizers, callbacks=callbacks)
    trainer.train()
    trainer.save_model()
    trainer.save_state()
    return {"vocab_size": len(vocab), "ln_vocab": math.log(len(vocab))}
