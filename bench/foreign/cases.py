"""The foreign suite's runs: what each trainer is told, which file a user would import, what the right answer is.

accept: the cause names that count as right. A natural high-LR instability accepts either logit cause or
lr_too_high. fault_step is in the log's own step numbers (HF counts optimizer steps from 1, so a fault on batch b
shows at step b + 1); None where the fault spans the whole run (no step is checked). traceable: whether the fault
leaves any mark in what this trainer logs (False: the honest answer is "not testable", never "healthy"): marked
from the trained runs by one rule, the logged loss rises more than 0.25 nat above its running minimum (the healthy
runs' largest rise is 0.18) or above ln V, or a logged LR or gradient norm shows the event.
vocab_flag: whether the user passes --vocab-size (they know it when their config file holds it).
"""
from dataclasses import dataclass, field

NATURAL = ("attention_logit_growth", "output_logit_divergence", "lr_too_high")


@dataclass(frozen=True)
class Case:
    name: str
    trainer: str  # nanogpt | hf | csv
    config: dict
    source: str  # tb | tb-parent | tb-run | printlog | trainer_state | csv | lightning
    accept: tuple = ("healthy",)
    fault_step: int | None = None
    fault_len: int = 1
    log_every: int = 1
    traceable: bool = True
    vocab_flag: bool = False
    note: str = ""
    extra_flags: tuple = field(default=())

    @property
    def healthy(self):
        return self.accept == ("healthy",)


def _f(kind, step=None, **kw):
    return {"kind": kind, **({"step": step} if step is not None else {}), **kw}


def _hf(kind, batch, **kw):
    return {"kind": kind, "batch": batch, **kw}


NANOGPT = [
    Case("n01-healthy", "nanogpt", {"log_grad_norm": True}, "tb", note="defaults: lr 1e-3, warmup 30, clip 1"),
    Case("n02-healthy-default-writer", "nanogpt", {"tb_default_dir": True, "seed": 2}, "tb-parent",
         note="SummaryWriter() default folder, no grad norm"),
    Case("n03-healthy-printlog", "nanogpt", {"seed": 3, "max_iters": 400}, "printlog", vocab_flag=True),
    Case("n04-lr-too-high", "nanogpt", {"learning_rate": 0.3, "min_lr": 0.03, "log_grad_norm": True}, "tb",
         accept=("lr_too_high",), note="peak 300x the default, 10x the best; warmup and clipping on"),
    Case("n05-lr-too-high-printlog", "nanogpt", {"learning_rate": 0.1, "min_lr": 0.01, "seed": 5}, "printlog",
         accept=("lr_too_high",), traceable=False),
    Case("n06-lr-spike", "nanogpt", {"log_grad_norm": True, "fault": _f("lr_spike", 150, factor=30, length=3)}, "tb",
         accept=("lr_spike",), fault_step=150, fault_len=3),
    Case("n07-lr-spike-printlog", "nanogpt", {"seed": 7, "fault": _f("lr_spike", 200, factor=100, length=2)},
         "printlog", accept=("lr_spike",), fault_step=200, fault_len=2,
         note="the printed log has no LR: only the loss shows it"),
    Case("n08-no-warmup", "nanogpt", {"learning_rate": 3e-2, "min_lr": 3e-3, "warmup_iters": 0,
                                      "log_grad_norm": True}, "tb", accept=("no_warmup",),
         note="3e-2 trains well with 30 warmup steps"),
    Case("n09-grad-scale", "nanogpt", {"grad_clip": 0.0, "fault": _f("grad_scale", 150, factor=1e4)}, "tb",
         accept=("gradient_explosion",), fault_step=150, note="clipping off, so no grad norm is logged"),
    Case("n10-bad-batch", "nanogpt", {"log_grad_norm": True, "fault": _f("bad_batch", 180, token=1)}, "tb",
         accept=("bad_batch",), fault_step=180),
    Case("n11-bad-batch-garbage", "nanogpt", {"seed": 11, "fault": _f("bad_batch", 120, garbage=True)}, "printlog",
         accept=("bad_batch",), fault_step=120, vocab_flag=True),
    Case("n12-stuck-loader", "nanogpt", {"log_grad_norm": True, "fault": _f("stuck_loader", 150, length=30)}, "tb",
         accept=("stuck_loader",), fault_step=150, fault_len=30),
    Case("n13-natural", "nanogpt", {"learning_rate": 0.15, "min_lr": 0.15, "warmup_iters": 50, "grad_clip": 0.0,
                                    "weight_decay": 0.0}, "tb", accept=NATURAL, note="constant 0.15, no clipping"),
]

HF = [
    Case("h01-healthy-defaults", "hf", {}, "trainer_state", log_every=10,
         note="HF defaults: lr 5e-5, linear, no warmup; logging_steps=10"),
    Case("h02-healthy-defaults-tb", "hf", {"seed": 2, "logging_steps": 5}, "tb-parent", log_every=5,
         vocab_flag=True),
    Case("h03-healthy-tuned", "hf", {"seed": 3, "learning_rate": 1e-3, "warmup_steps": 30,
                                     "lr_scheduler_type": "cosine", "logging_steps": 1}, "tb-run", vocab_flag=True),
    Case("h04-lr-too-high", "hf", {"learning_rate": 0.2, "warmup_steps": 30, "logging_steps": 10},
         "trainer_state", accept=("lr_too_high",), log_every=10, note="10x the best LR"),
    Case("h05-lr-too-high-constant", "hf", {"seed": 5, "learning_rate": 0.3, "warmup_steps": 20,
                                            "lr_scheduler_type": "constant_with_warmup", "logging_steps": 10},
         "tb-run", accept=("lr_too_high",), log_every=10, vocab_flag=True),
    Case("h06-no-warmup", "hf", {"learning_rate": 5e-2, "logging_steps": 1}, "trainer_state",
         accept=("no_warmup",), vocab_flag=True, note="5e-2 trains well with 30 warmup steps"),
    Case("h07-lr-spike", "hf", {"learning_rate": 1e-3, "warmup_steps": 30, "logging_steps": 1,
                                "fault": _hf("lr_spike", 150, factor=100, length=3)}, "tb-run",
         accept=("lr_spike",), fault_step=151, fault_len=3),
    Case("h08-lr-spike-coarse-log", "hf", {"seed": 8, "learning_rate": 1e-3, "warmup_steps": 30,
                                           "logging_steps": 10, "fault": _hf("lr_spike", 201, factor=100, length=3)},
         "trainer_state", accept=("lr_spike",), fault_step=202, fault_len=3, log_every=10,
         note="the logged LR is each interval's last: the spike itself is never logged, only its loss"),
    Case("h09-grad-scale", "hf", {"learning_rate": 1e-3, "warmup_steps": 30, "max_grad_norm": 0.0,
                                  "logging_steps": 1, "fault": _hf("grad_scale", 150, factor=1e4)}, "tb-run",
         accept=("gradient_explosion",), fault_step=151, vocab_flag=True),
    Case("h10-bad-batch", "hf", {"learning_rate": 1e-3, "warmup_steps": 30, "logging_steps": 1,
                                 "fault": _hf("bad_batch", 160, token=5)}, "trainer_state",
         accept=("bad_batch",), fault_step=161, vocab_flag=True),
    Case("h11-bad-batch-averaged", "hf", {"seed": 11, "learning_rate": 1e-3, "warmup_steps": 30, "logging_steps": 10,
                                          "fault": _hf("bad_batch", 170, garbage=True)}, "tb-parent",
         accept=("bad_batch",), fault_step=171, log_every=10, note="averaged with nine good steps"),
    Case("h12-stuck-loader", "hf", {"learning_rate": 1e-3, "warmup_steps": 30, "logging_steps": 5,
                                    "fault": _hf("stuck_loader", 120, length=40)}, "trainer_state",
         accept=("stuck_loader",), fault_step=121, fault_len=40, log_every=5, traceable=False),
    Case("h13-natural", "hf", {"learning_rate": 0.3, "lr_scheduler_type": "constant_with_warmup", "warmup_steps": 100,
                               "max_grad_norm": 0.0, "logging_steps": 1}, "tb-run", accept=NATURAL, vocab_flag=True,
         note="learns while the warmup's LR is low, diverges above ln V as it nears 0.3"),
]

CSV = [
    Case("c01-healthy-adam-constant", "csv", {}, "csv", note="Adam 3e-4, no schedule, step,loss,lr"),
    Case("c02-healthy-grad-norm", "csv", {"seed": 2, "log_grad_norm": True}, "csv"),
    Case("c03-healthy-cosine", "csv", {"seed": 3, "lr": 1e-3, "schedule": "warmup_cosine", "clip": 1.0,
                                       "log_grad_norm": True}, "csv"),
    Case("c04-healthy-lightning", "csv", {"seed": 4, "style": "lightning", "log_every": 50}, "lightning",
         log_every=50, note="CSVLogger every 50 steps: first row is step 49"),
    Case("c05-lr-too-high", "csv", {"lr": 0.1, "log_grad_norm": True}, "csv", accept=NATURAL,
         note="constant 333x the default; diverges, then recovers"),
    Case("c06-lr-spike", "csv", {"log_grad_norm": True, "fault": _f("lr_spike", 200, factor=300, length=3)}, "csv",
         accept=("lr_spike",), fault_step=200, fault_len=3),
    Case("c07-grad-scale", "csv", {"seed": 7, "log_grad_norm": True, "fault": _f("grad_scale", 200, factor=1e4)},
         "csv", accept=("gradient_explosion",), fault_step=200),
    Case("c08-bad-batch", "csv", {"seed": 8, "log_grad_norm": True, "fault": _f("bad_batch", 250, garbage=True)},
         "csv", accept=("bad_batch",), fault_step=250, vocab_flag=True),
    Case("c09-stuck-loader", "csv", {"fault": _f("stuck_loader", 150, length=40)}, "csv",
         accept=("stuck_loader",), fault_step=150, fault_len=40),
    Case("c10-lightning-bad-batch", "csv", {"style": "lightning", "log_every": 50,
                                            "fault": _f("bad_batch", 180, garbage=True)}, "lightning",
         accept=("bad_batch",), fault_step=180, log_every=50,
         note="step 180 is between logged rows (149, 199)", traceable=False),
    Case("c11-lightning-stuck", "csv", {"seed": 11, "style": "lightning", "log_every": 50,
                                        "fault": _f("stuck_loader", 160, length=40)}, "lightning",
         accept=("stuck_loader",), fault_step=160, fault_len=40, log_every=50, traceable=False,
         note="row 199 is inside the repeat, but barely below its neighbours"),
    Case("c12-no-warmup", "csv", {"lr": 5e-2, "schedule": "warmup_cosine", "warmup": 0, "clip": 1.0,
                                  "log_grad_norm": True}, "csv", accept=("no_warmup",),
         note="5e-2 trains well with 40 warmup steps"),
    Case("c13-natural", "csv", {"seed": 13, "lr": 5e-2, "log_grad_norm": True}, "csv", accept=NATURAL),
    Case("c14-lightning-lr-too-high", "csv", {"style": "lightning", "log_every": 50, "lr": 0.1}, "lightning",
         accept=NATURAL, log_every=50),
]

CASES = NANOGPT + HF + CSV
