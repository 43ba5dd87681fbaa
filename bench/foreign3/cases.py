"""The 42 runs of the third held-out foreign suite (33 faulty, 9 healthy): trainer, config, what the user
imports and with which flags, the key (accepted causes), the fault step in the log's own numbering, and
whether the fault leaves a trace in what is logged (README.md's rule, checked by trace.py).

Each run's config is passed to its trainer unchanged; `fault_at` is the trainer's own 0-based step (update)
counter, `fault_step` the step the log shows it at (the HF Trainer numbers updates from 1).
"""
from dataclasses import dataclass, field

NATURAL = ("attention_logit_growth", "output_logit_divergence", "lr_too_high")


@dataclass
class Case:
    name: str
    trainer: str  # gru | opt | mixer
    config: dict
    source: str  # tb | tb-parent | tb-run | trainer_state | wandb
    accept: tuple = ("healthy",)
    fault_step: int | None = None
    fault_len: int = 1
    traceable: bool = True
    vocab_flag: bool = False
    extra_flags: tuple = ()
    log_every: int = field(init=False)

    def __post_init__(self):
        self.log_every = self.config.get("log_every", 1)

    @property
    def healthy(self):
        return self.accept == ("healthy",)


GRU = dict(steps=300, lr=3e-3, warmup=0, schedule="constant", optimizer="adam", hidden=48, layers=1,
           batch_size=16, block=24, log_every=1, clip=1.0, log="loss+lr+grad_norm", writer="tb")
MIXER = dict(steps=300, lr=3e-3, warmup=20, schedule="cosine", optimizer="adamw", dim=48, depth=2, batch_size=16,
             block=24, log_every=1, clip=1.0, log="loss+lr+grad_norm")
OPT = dict(steps=300, lr=2e-3, warmup=20, schedule="cosine", model="opt", hidden=64, layers=2, heads=4,
           batch_size=16, block=32, log_every=10, clip=1.0)


def _cfg(base, cfg, fault_len):
    """The trainer's config: its defaults, the case's settings, and how many steps an injected fault lasts."""
    return {**base, **cfg, **({"fault_len": fault_len} if "fault" in cfg else {})}


def gru(name, accept=("healthy",), fault_step=None, fault_len=1, traceable=True, vocab_flag=True, extra_flags=(),
        **cfg):
    source = "tb-parent" if cfg.get("writer") == "default" else "tb"
    return Case(f"g-{name}", "gru", _cfg(GRU, cfg, fault_len), source, tuple(accept), fault_step, fault_len,
                traceable, vocab_flag, tuple(extra_flags))


def mixer(name, accept=("healthy",), fault_step=None, fault_len=1, traceable=True, vocab_flag=True, extra_flags=(),
          **cfg):
    return Case(f"m-{name}", "mixer", _cfg(MIXER, cfg, fault_len), "wandb", tuple(accept), fault_step, fault_len,
                traceable, vocab_flag, tuple(extra_flags))


def opt(name, accept=("healthy",), fault_step=None, fault_len=1, traceable=True, source="trainer_state", **cfg):
    # HF: the vocabulary size comes from config.json beside the log, so its user passes no flag
    return Case(f"o-{name}", "opt", _cfg(OPT, cfg, fault_len), source, tuple(accept), fault_step, fault_len, traceable)


BS16 = ("--batch-size", "16")

CASES = [
    # --- GRU + TensorBoard with Lightning's scalar names -------------------------------------------------------
    gru("healthy-const", extra_flags=BS16),
    gru("healthy-cosine", optimizer="adamw", lr=2e-3, warmup=30, schedule="cosine", log_every=10, log="loss+lr",
        writer="default", vocab_flag=False),
    gru("healthy-coarse", lr=5e-3, warmup=20, schedule="linear", steps=400, log_every=50, log="loss", hidden=32),
    gru("lrhigh-const", ["lr_too_high"], 0, 30, lr=0.3, log_every=5, clip=0),
    gru("lrhigh-warm", ["lr_too_high"], 0, 50, lr=0.3, warmup=50, schedule="cosine", log_every=10, log="loss",
        vocab_flag=False),
    gru("spike-x100", ["lr_spike"], 150, 5, fault="lr_spike", fault_at=150, spike=100, clip=0),
    gru("spike-x30-coarse", ["lr_spike"], 320, 3, traceable=False, fault="lr_spike", fault_at=320, spike=30,
        steps=400,
        log_every=50, log="loss", writer="default"),
    gru("scale-65536", ["gradient_explosion"], 160, 1, fault="gradient_explosion", fault_at=160, scale=65536.0,
        clip=0, extra_flags=BS16),
    gru("scale-1024-coarse", ["gradient_explosion"], 310, 1, fault="gradient_explosion", fault_at=310,
        scale=1024.0, clip=0, steps=400, log_every=50, log="loss"),
    gru("badbatch-garbage", ["bad_batch"], 180, 1, fault="bad_batch", fault_at=180, bad_kind="garbage",
        extra_flags=BS16),
    gru("badbatch-repeat-coarse", ["bad_batch"], 310, 1, traceable=False, fault="bad_batch", fault_at=310,
        bad_kind="repeat",
        steps=400, log_every=50, log="loss", hidden=32),
    gru("stuck-40", ["stuck_loader"], 120, 40, fault="stuck_loader", fault_at=120, log="loss+lr"),
    gru("stuck-25-coarse", ["stuck_loader"], 310, 25, traceable=False, fault="stuck_loader", fault_at=310, steps=400,
        log_every=50,
        log="loss",
        optimizer="adamw"),
    gru("natural", NATURAL, 0, 30, lr=0.1, clip=0, betas=[0.9, 0.99], hidden=96, writer="default",
        vocab_flag=False),
    # --- MLP-Mixer + a W&B-style history CSV ---------------------------------------------------------------------
    mixer("healthy-cosine", extra_flags=BS16),
    mixer("healthy-const", optimizer="adam", lr=1e-3, warmup=0, schedule="constant", log_every=5, log="loss",
          vocab_flag=False),
    mixer("healthy-big", dim=64, depth=3, lr=2e-3, warmup=40, schedule="linear", log_every=10, log="loss+lr",
          clip=0),
    mixer("lrhigh-x20", ["lr_too_high"], 0, 20, lr=1.0, schedule="constant", clip=0),
    mixer("lrhigh-x16-coarse", ["lr_too_high"], 0, 20, lr=0.8, log_every=50, log="loss", steps=400),
    mixer("spike-x30-coarse", ["lr_spike"], 320, 4, traceable=False, fault="lr_spike", fault_at=320, spike=30,
          clip=0, steps=400,
          log_every=50, log="loss"),
    mixer("spike-x200", ["lr_spike"], 200, 6, fault="lr_spike", fault_at=200, spike=200, log_every=5,
          log="loss"),
    mixer("nowarmup-adam", ["no_warmup"], 0, 50, optimizer="adam", lr=0.3, warmup=0, clip=0, log="loss+lr"),
    mixer("nowarmup-coarse", ["no_warmup"], 0, 50, lr=0.5, warmup=0, schedule="linear",
          log_every=10, log="loss+lr+grad_norm", clip=0, vocab_flag=False),
    mixer("scale-65536", ["gradient_explosion"], 170, 1, fault="gradient_explosion", fault_at=170, clip=0),
    mixer("scale-1024-coarse", ["gradient_explosion"], 330, 1, fault="gradient_explosion", fault_at=330,
          scale=1024.0, clip=0, steps=400, log_every=50, log="loss"),
    mixer("badbatch-garbage", ["bad_batch"], 190, 1, fault="bad_batch", fault_at=190, bad_kind="garbage",
          extra_flags=BS16),
    mixer("stuck-30", ["stuck_loader"], 300, 30, fault="stuck_loader", fault_at=300,
          log_every=50, log="loss", steps=400),
    mixer("natural", NATURAL, 0, 50, lr=0.5, warmup=50, schedule="constant", clip=0, vocab_flag=False),
    # --- HF Trainer on a random OPT / GPT-Neo ---------------------------------------------------------------------
    opt("healthy-cosine"),
    opt("healthy-linear-nowarmup", lr=5e-4, warmup=0, schedule="linear", log_every=5, source="tb-run"),
    opt("healthy-neo", model="neo", hidden=48, layers=2, lr=3e-3, warmup=30, log_every=1),
    opt("lrhigh-x15", ["lr_too_high"], 1, 20, traceable=False, lr=0.15, clip=0),
    opt("lrhigh-x25-neo", ["lr_too_high"], 1, 20, model="neo", lr=0.05, warmup=0, clip=0, log_every=5,
        source="tb-run"),
    opt("spike-x25", ["lr_spike"], 181, 5, fault="lr_spike", fault_at=180, spike=25, clip=0,
        log_every=1),
    opt("nowarmup", ["no_warmup"], 1, 40, lr=0.04, warmup=0, schedule="constant", clip=0),
    opt("nowarmup-linear", ["no_warmup"], 1, 40, lr=0.04, warmup=0, schedule="linear", clip=0, log_every=5,
        source="tb-run"),
    opt("scale-65536", ["gradient_explosion"], 161, 1, fault="gradient_explosion", fault_at=160, clip=0,
        log_every=1),
    opt("scale-65536-coarse", ["gradient_explosion"], 201, 1, fault="gradient_explosion", fault_at=200, clip=0,
        log_every=10, source="tb-run"),
    opt("badbatch-garbage", ["bad_batch"], 151, 1, fault="bad_batch", fault_at=150, bad_kind="garbage",
        log_every=1),
    opt("badbatch-repeat-coarse", ["bad_batch"], 321, 1, traceable=False, fault="bad_batch", fault_at=320,
        bad_kind="repeat",
        steps=400, log_every=50),
    opt("stuck-50-coarse", ["stuck_loader"], 101, 50, traceable=False, fault="stuck_loader", fault_at=100,
        log_every=50, steps=400, source="tb-run"),
    opt("natural", NATURAL, 1, 20, lr=0.1, warmup=0, schedule="constant", clip=0, hidden=96, layers=3,
        betas=[0.9, 0.95], log_every=1),
]
