"""The 42 runs of the second held-out foreign suite (9 healthy, 33 faulty), three trainers written apart
from bench/foreign's: gptchar (nanoGPT-style, characters, TensorBoard + printed log), hfllama (HF Trainer,
random Llama) and litcsv (an LSTM loop writing Lightning's metrics.csv or a plain log.csv).

fault_step is in the log's own numbering (HF counts optimizer steps from 1, so batch b is step b+1); None
for a fault that spans the whole run (LR too high, no warmup, the natural instability). traced says whether
the fault leaves a mark in what its trainer logged, by the rule in README.md, measured by trace.py once the
runs were made (python bench/foreign2/trace.py).
"""
from dataclasses import dataclass

NATURAL = ("attention_logit_growth", "output_logit_divergence", "lr_too_high")


@dataclass
class Case:
    name: str
    trainer: str
    source: str  # tb | tb-parent | tb-run | printlog | trainer_state | csv | lightning
    config: dict
    accept: tuple = ()  # causes named right; empty for a healthy run
    fault_step: int | None = None
    fault_len: int = 1
    traced: bool | None = None  # None for a healthy run
    vocab_flag: bool = False
    extra_flags: tuple = ()

    @property
    def healthy(self):
        return not self.accept

    @property
    def traceable(self):
        return bool(self.traced)

    @property
    def log_every(self):
        return self.config.get("log_interval") or self.config.get("logging_steps") or self.config["log_every"]


GPT = dict(block_size=32, batch_size=16, n_layer=2, n_embd=48, n_head=4, learning_rate=1e-2, betas=[0.9, 0.95],
           weight_decay=0.1, warmup_iters=30, schedule="cosine", min_lr=3e-4, max_iters=400, grad_clip=1.0,
           log_interval=10, log="loss+lr+grad_norm", tb_dir=True)
HF = dict(vocab="words", hidden=64, layers=2, heads=4, block_size=32, batch_size=16, max_steps=200,
          learning_rate=3e-3, warmup_steps=20, scheduler="cosine", logging_steps=10, max_grad_norm=1.0)
LIT = dict(style="lightning", columns=["loss", "lr", "grad_norm"], block_size=24, batch_size=16, emb=32, hidden=64,
           steps=400, lr=3e-2, log_every=10)
B16 = ("--batch-size", "16")


def gpt(name, source, accept=(), fault_step=None, fault_len=1, extra=B16, **cfg):
    return Case(name, "gptchar", source, {**GPT, **cfg}, accept, fault_step, fault_len, None, True, extra)


def hf(name, source, accept=(), fault_step=None, fault_len=1, **cfg):
    return Case(name, "hfllama", source, {**HF, **cfg}, accept, fault_step, fault_len)


def lit(name, source, accept=(), fault_step=None, fault_len=1, extra=(), **cfg):
    return Case(name, "litcsv", source, {**LIT, **cfg}, accept, fault_step, fault_len, None, True, extra)


CASES = [
    # gptchar: nanoGPT-style loop on characters (V = 28)
    gpt("g-healthy-cosine", "tb"),
    gpt("g-healthy-const-adam", "printlog", learning_rate=1e-3, warmup_iters=0, schedule="constant",
        betas=[0.9, 0.999], grad_clip=0.0, log_interval=1, log="loss", extra=()),
    gpt("g-healthy-small-default-writer", "tb-parent", n_layer=1, n_embd=32, learning_rate=2e-3, warmup_iters=50,
        log_interval=5, log="loss+lr", tb_dir=False),
    gpt("g-lr-high-30x", "tb", ("lr_too_high",), learning_rate=0.3),
    gpt("g-lr-high-20x-noclip", "printlog", ("lr_too_high",), learning_rate=0.2, grad_clip=0.0, log_interval=5,
        log="loss"),
    gpt("g-lr-spike-x20", "tb", ("lr_spike",), 200, 5, fault=dict(kind="lr_spike", at=200, length=5, mult=20),
        log_interval=1),
    gpt("g-lr-spike-x10-printed", "printlog", ("lr_spike",), 233, 3,
        fault=dict(kind="lr_spike", at=233, length=3, mult=10), log="loss"),
    gpt("g-no-warmup", "tb", ("no_warmup",), learning_rate=0.1, warmup_iters=0, schedule="constant", grad_clip=0.0,
        log_interval=5,
        log="loss+lr"),
    gpt("g-grad-scale-65536", "tb", ("gradient_explosion",), 150, grad_clip=0.0, log_interval=1,
        fault=dict(kind="gradient_explosion", at=150, scale=65536.0)),
    gpt("g-grad-scale-1024-coarse", "tb-parent", ("gradient_explosion",), 247, grad_clip=0.0, log="loss+lr",
        tb_dir=False, fault=dict(kind="gradient_explosion", at=247, scale=1024.0)),
    gpt("g-bad-batch-garbage", "tb", ("bad_batch",), 180, log_interval=1,
        fault=dict(kind="bad_batch", at=180, garbage=True)),
    gpt("g-bad-batch-one-token", "printlog", ("bad_batch",), 300, log_interval=1, log="loss",
        fault=dict(kind="bad_batch", at=300, token=0)),
    gpt("g-stuck-loader-40", "tb", ("stuck_loader",), 150, 40, log_interval=5,
        fault=dict(kind="stuck_loader", at=150, length=40)),
    gpt("g-natural-high-lr", "tb", NATURAL, learning_rate=0.3, warmup_iters=0, schedule="constant", grad_clip=0.0,
        n_embd=64, max_iters=500, log_interval=5),

    # hfllama: HF Trainer, random Llama on words (V = 55) or bytes (V = 256); config.json gives V
    hf("h-healthy-linear-nowarmup", "trainer_state", learning_rate=5e-4, warmup_steps=0, scheduler="linear"),
    hf("h-healthy-bytes-tied", "tb-run", vocab="bytes", tie=True, logging_steps=5),
    hf("h-healthy-constant", "tb-parent", learning_rate=3e-4, warmup_steps=0, scheduler="constant",
       logging_steps=1),
    hf("h-lr-high-30x", "trainer_state", ("lr_too_high",), learning_rate=9e-2, scheduler="linear"),
    hf("h-lr-high-20x", "tb-parent", ("lr_too_high",), learning_rate=6e-2, logging_steps=5),
    hf("h-lr-spike-x30", "trainer_state", ("lr_spike",), 121, 4, logging_steps=1,
       fault=dict(kind="lr_spike", batch=120, length=4, mult=30)),
    hf("h-lr-spike-x10-coarse", "tb-run", ("lr_spike",), 94, 2,
       fault=dict(kind="lr_spike", batch=93, length=2, mult=10)),
    hf("h-no-warmup", "trainer_state", ("no_warmup",), learning_rate=5e-2, warmup_steps=0, scheduler="constant",
       max_grad_norm=0.0, logging_steps=5),
    hf("h-grad-scale-1e4", "trainer_state", ("gradient_explosion",), 101, max_grad_norm=0.0, logging_steps=1,
       fault=dict(kind="gradient_explosion", batch=100, scale=1e4)),
    hf("h-grad-scale-1e3-coarse", "tb-parent", ("gradient_explosion",), 134, max_grad_norm=0.0,
       fault=dict(kind="gradient_explosion", batch=133, scale=1e3)),
    hf("h-bad-batch-garbage", "trainer_state", ("bad_batch",), 111, logging_steps=1,
       fault=dict(kind="bad_batch", batch=110, garbage=True)),
    hf("h-bad-batch-one-token-averaged", "tb-run", ("bad_batch",), 78,
       fault=dict(kind="bad_batch", batch=77, token=3)),
    hf("h-stuck-loader-50", "trainer_state", ("stuck_loader",), 81, 50, logging_steps=5,
       fault=dict(kind="stuck_loader", batch=80, length=50)),
    hf("h-natural-bytes-high-lr", "trainer_state", NATURAL, vocab="bytes", learning_rate=8e-2, warmup_steps=0,
       scheduler="constant", max_grad_norm=0.0, max_steps=300, logging_steps=5),

    # litcsv: LSTM on words (V = 55), Lightning's metrics.csv or a plain log.csv with an averaged loss
    lit("l-healthy-lightning-every-50", "lightning", columns=["loss"], steps=500, log_every=50),
    lit("l-healthy-plain-cosine", "csv", style="plain", columns=["loss", "lr"], optimizer="adamw", warmup=20,
        schedule="cosine", extra=B16),
    lit("l-healthy-lightning-every-step", "lightning", lr=2e-3, warmup=40, schedule="cosine", clip=1.0,
        log_every=1),
    lit("l-lr-high-30x", "lightning", ("lr_too_high",), lr=1.0),
    lit("l-lr-high-20x-plain", "csv", ("lr_too_high",), style="plain", columns=["loss"], lr=0.6),
    lit("l-lr-spike-x30", "lightning", ("lr_spike",), 250, 5, columns=["loss", "lr"], log_every=1,
        fault=dict(kind="lr_spike", at=250, length=5, mult=30)),
    lit("l-lr-spike-x15-every-50", "lightning", ("lr_spike",), 222, 3, columns=["loss"], log_every=50,
        fault=dict(kind="lr_spike", at=222, length=3, mult=15)),
    lit("l-no-warmup", "lightning", ("no_warmup",), optimizer="adamw", betas=[0.9, 0.95], lr=0.6, log_every=5,
        columns=["loss", "lr"], extra=B16),
    lit("l-grad-scale-65536", "lightning", ("gradient_explosion",), 200, log_every=1,
        fault=dict(kind="gradient_explosion", at=200, scale=65536.0)),
    lit("l-grad-scale-4096-plain", "csv", ("gradient_explosion",), 313, style="plain",
        fault=dict(kind="gradient_explosion", at=313, scale=4096.0)),
    lit("l-bad-batch-garbage-plain", "csv", ("bad_batch",), 260, style="plain", columns=["loss", "lr"], log_every=1,
        fault=dict(kind="bad_batch", at=260, garbage=True), extra=B16),
    lit("l-bad-batch-one-token-every-50", "lightning", ("bad_batch",), 180, columns=["loss"], log_every=50,
        fault=dict(kind="bad_batch", at=180, token=0)),
    lit("l-stuck-loader-50", "lightning", ("stuck_loader",), 150, 50, columns=["loss", "lr"],
        fault=dict(kind="stuck_loader", at=150, length=50)),
    lit("l-natural-high-lr", "lightning", NATURAL, lr=1.0, hidden=128, log_every=5),
]

# the faults that leave no trace in what their trainer logged (README.md's rule, measured by trace.py): a
# plateau rather than a rise, or an event between two logged rows, averaged away, or in a column not logged
NO_TRACE = {"g-lr-high-30x", "g-lr-high-20x-noclip", "g-no-warmup", "h-lr-spike-x10-coarse",
            "h-grad-scale-1e3-coarse", "l-lr-spike-x15-every-50", "l-no-warmup", "l-bad-batch-one-token-every-50"}
for _case in CASES:
    _case.traced = None if _case.healthy else _case.name not in NO_TRACE
