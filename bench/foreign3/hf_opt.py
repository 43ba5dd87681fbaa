"""The Hugging Face Trainer on a small randomly initialised OPT or GPT-Neo causal LM with a word vocabulary,
set up as a user of the Trainer sets it up: TrainingArguments, report_to="tensorboard", save_state() and
save_model() at the end (trainer_state.json and config.json in the output folder).

cfg: steps, lr, warmup, schedule (constant | cosine | linear: the LambdaLR handed to the Trainer),
model (opt | neo), hidden, layers, heads, batch_size, block, log_every, clip (max_grad_norm, 0 = off),
betas, weight_decay (AdamW's), and a fault. The Trainer sees the batches in step order
(an IterableDataset), so a fault lands at the update the config names.
"""
import torch
from torch.utils.data import IterableDataset
from transformers import (GPTNeoConfig, GPTNeoForCausalLM, OPTConfig, OPTForCausalLM, Trainer, TrainingArguments)

from data import Batches, lr_at, make_text, scale_grads, word_tokens


class StepOrdered(IterableDataset):
    """One example per row of each step's batch, in step order."""

    def __init__(self, batches, steps):
        self.batches, self.steps = batches, steps

    def __iter__(self):
        for step in range(self.steps):
            x, y = self.batches.batch(step)
            for xi, yi in zip(x, y):
                yield {"input_ids": xi, "labels": xi.clone()}


class LossScaleTrainer(Trainer):
    """A Trainer whose training step multiplies the gradients by a loss scale at one update and never unscales
    them (a hand-rolled mixed-precision port); every other update is the stock one."""

    def __init__(self, *args, fault_cfg=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fault_cfg = fault_cfg or {}

    def training_step(self, model, inputs, num_items_in_batch=None):
        loss = super().training_step(model, inputs, num_items_in_batch)
        scale_grads(model, self.state.global_step, self.fault_cfg)
        return loss


def build_model(cfg, vocab_size):
    hidden, layers, heads = cfg.get("hidden", 64), cfg.get("layers", 2), cfg.get("heads", 4)
    block = cfg.get("block", 32)
    if cfg.get("model", "opt") == "neo":
        config = GPTNeoConfig(vocab_size=vocab_size, hidden_size=hidden, num_layers=layers, num_heads=heads,
                              attention_types=[[["global", "local"], layers // 2]], window_size=16,
                              max_position_embeddings=block, intermediate_size=4 * hidden)
        return GPTNeoForCausalLM(config)
    config = OPTConfig(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers,
                       num_attention_heads=heads, ffn_dim=4 * hidden, max_position_embeddings=block,
                       word_embed_proj_dim=hidden, pad_token_id=0, bos_token_id=0, eos_token_id=0)
    return OPTForCausalLM(config)


def train(out, cfg):
    torch.manual_seed(cfg.get("seed", 0))
    ids, vocab_size = word_tokens(make_text())
    model = build_model(cfg, vocab_size)
    betas = cfg.get("betas", (0.9, 0.999))
    args = TrainingArguments(output_dir=str(out), max_steps=cfg["steps"],
                             per_device_train_batch_size=cfg.get("batch_size", 16),
                             learning_rate=cfg["lr"], logging_steps=cfg.get("log_every", 10),
                             max_grad_norm=cfg.get("clip", 1.0), adam_beta1=betas[0], adam_beta2=betas[1],
                             weight_decay=cfg.get("weight_decay", 0.0), report_to=["tensorboard"],
                             save_strategy="no", use_cpu=True, dataloader_num_workers=0, seed=cfg.get("seed", 0),
                             disable_tqdm=True)
    batches = Batches(ids, vocab_size, cfg.get("batch_size", 16), cfg.get("block", 32), cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], betas=tuple(betas),
                                  weight_decay=cfg.get("weight_decay", 0.0))
    # the Trainer's scheduler steps after each update: update k (0-based) runs at lr_at(k)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: lr_at(k, cfg) / cfg["lr"])
    trainer = LossScaleTrainer(model=model, args=args, train_dataset=StepOrdered(batches, cfg["steps"]),
                               optimizers=(optimizer, schedule), fault_cfg=cfg)
    trainer.train()
    trainer.save_state()
    trainer.save_model()
    return {"vocab_size": vocab_size, "params": sum(p.numel() for p in model.parameters())}
