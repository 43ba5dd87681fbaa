"""The runs the stability walker is evaluated on, by split (bench/eval_diagnosis.py scores them).

    tuning      the runs the tuned thresholds were set on and may be changed on: seeds 1, 6 and 7 at the
                default config (every registered fault, near misses), and the lab's three faults on seed 1
    held-out    every registered fault (the lab's three too) under conditions no tuned threshold saw: batch
                sizes 4 and 16, the `medium` preset, warmups of 10 and 300 steps, a decay to 0, a higher peak
                LR, K just after the warmup and in the last steps of a run, magnitudes at the edge of
                visibility; seeds 11-15, never used for tuning
    oov         training conditions that are NOT faults of the tree's vocabulary (batch 2, weight decay 1.0,
                beta1 0.5, a small init, a short context, a small model, a smaller or re-drawn corpus, a tight
                clip): healthy or `unknown` is right, any registered cause is a wrong name. Looked at while
                the rules were set (so: tuning data for the out-of-vocabulary question)
    oov-sealed  more such conditions, defined before the rules were final and run once after (seeds 31-35)

The rule (docs/diagnosis.md): thresholds change only on the tuning split. A change made after the held-out
split was scored moves the held-out cases it was made for into tuning, and a fresh held-out set is drawn
(new seeds, new conditions).
"""
from __future__ import annotations

from dataclasses import dataclass, field

CAUSE_OF_INJECTION = {"scale": "gradient_explosion", "bad_batch": "bad_batch", "v_corrupt": "optimizer_state_corruption",
                      "lr_spike": "lr_spike", "corrupt_batch": "bad_batch", "stuck_loader": "stuck_loader",
                      "target_leak": "target_leak", "adam_setting": "optimizer_setting"}
SPLITS = ("tuning", "held-out", "oov", "oov-sealed", "natural", "natural-sealed")


@dataclass
class Case:
    name: str  # folder inside its group
    seed: int
    sets: list[str]  # config overrides beyond the suite's base (the group's condition included)
    truth: str  # the cause that was put in ("healthy" for a clean or out-of-vocabulary run)
    expect: str  # what a correct walker says: the truth, or "healthy" for a designed no-trace case
    kind: str  # clean | injection | break | lr_bug | oov
    k: int | None = None
    magnitude: str = ""  # scale / factor / sentence / condition, for the tables
    param: str = ""
    borderline: bool = False  # within natural variation: either verdict is accepted, reported apart
    split: str = "tuning"
    near_miss: bool = False  # may stay healthy or unknown (the right name also counts), reported apart from recall
    oov: bool = False  # outside the tree's vocabulary: healthy / unknown accepted, any name is wrong
    group: str = ""  # the folder shared by a clean run and the injections forked from it (default seedN)
    condition: str = "default config"  # what about the run differs from the tuning runs' config
    tolerance: int = 0  # steps the found anomaly step may differ from K (0: exact)
    also: tuple[str, ...] = ()  # other causes that are right too (a natural failure several interventions fix)
    result: dict = field(default_factory=dict)

    @property
    def folder(self) -> str:
        return f"{self.group or f'seed{self.seed}'}/{self.name}"

    @property
    def must_name(self) -> bool:
        """A fault the walker must name (recall counts it): not a near miss, not borderline, not healthy."""
        return self.expect not in ("healthy", "unknown") and not self.near_miss and not self.borderline and not self.oov


FULL_BASE = ["progress=false", "ckpt_keep_last=0"]  # every checkpoint kept: an injection forks at its K
QUICK_BASE = ["steps=200", "warmup_steps=20", "ckpt_every=50", "eval_every=50", "spectral_every=0", "progress=false",
              "ckpt_keep_last=0"]  # every checkpoint kept: an injection forks at its K

RARE_SENTENCES = ["She has written the letter.", "You have eaten an apple.", "It has gone.", "I have seen."]
COMMON_SENTENCE = "You finish the project."


def _inj(kind: str, k: int, *extra: str) -> list[str]:
    return ["injection=" + kind, f"injection_step={k}", *extra]


# ---------------------------------------------------------------------------------------------------
# tuning: the default config, seeds 1, 6, 7
# ---------------------------------------------------------------------------------------------------


def fault_cases(seed: int) -> list[Case]:
    """Every fault kind beyond the lab's three on one seed, over steps and severities, plus near misses. K is
    late (1200-1700, jittered by seed) so each forks from the clean run and costs little."""
    j = 17 * seed % 97
    k1, k2, k3 = 1210 + j, 1450 + j, 1620 + j
    inj = _inj
    return [
        Case(f"lr_spike-x30-5-k{k1}", seed, inj("lr_spike", k1, "injection_mult=30", "injection_span=5"),
             "lr_spike", "lr_spike", "injection", k1, "LR x30 for 5 steps"),
        Case(f"lr_spike-x3-50-k{k2}", seed, inj("lr_spike", k2, "injection_mult=3", "injection_span=50"),
             "lr_spike", "lr_spike", "injection", k2, "LR x3 for 50 steps"),
        Case(f"lr_spike-x0.2-30-k{k3}", seed, inj("lr_spike", k3, "injection_mult=0.2", "injection_span=30"),
             "lr_spike", "lr_spike", "injection", k3, "LR x0.2 for 30 steps (a dip)"),
        Case(f"corrupt-random8-k{k1}", seed, inj("corrupt_batch", k1, "injection_mode=random"),
             "bad_batch", "bad_batch", "injection", k1, "random ids, 8 of 8 rows"),
        Case(f"corrupt-shift4-k{k2}", seed, inj("corrupt_batch", k2, "injection_mode=shift", "injection_rows=4"),
             "bad_batch", "bad_batch", "injection", k2, "wrong-place cuts, 4 of 8 rows"),
        Case(f"corrupt-mismatch2-k{k3}", seed, inj("corrupt_batch", k3, "injection_mode=mismatch", "injection_rows=2"),
             "bad_batch", "bad_batch", "injection", k3, "mismatched targets, 2 of 8 rows"),
        Case(f"corrupt-shift1-k{k1 + 40}", seed, inj("corrupt_batch", k1 + 40, "injection_mode=shift", "injection_rows=1"),
             "bad_batch", "bad_batch", "injection", k1 + 40, "wrong-place cut, 1 of 8 rows", near_miss=True),
        Case(f"stuck-20-k{k2}", seed, inj("stuck_loader", k2, "injection_span=20"),
             "stuck_loader", "stuck_loader", "injection", k2, "same batch 20 steps"),
        Case(f"stuck-2-k{k3}", seed, inj("stuck_loader", k3, "injection_span=2"),
             "stuck_loader", "stuck_loader", "injection", k3, "same batch 2 steps (one repeat)", near_miss=True),
        Case(f"leak-k{k1 - 200}", seed, inj("target_leak", k1 - 200, "injection_span=0"),
             "target_leak", "target_leak", "injection", k1 - 200, "inputs = targets to the end"),
        Case(f"leak-20-k{k2}", seed, inj("target_leak", k2, "injection_span=20"),
             "target_leak", "target_leak", "injection", k2, "inputs = targets for 20 steps", near_miss=True),
        Case(f"adam-b2-0.6-k{k1}", seed, inj("adam_setting", k1, "injection_beta2=0.6"),
             "optimizer_setting", "optimizer_setting", "injection", k1, "beta2 0.95 -> 0.6 from K"),
    ]


def tuning_suite() -> list[Case]:
    inj = _inj
    cases = [
        Case("clean", 1, [], "healthy", "healthy", "clean"),
        Case("lr10x20-k600", 1, inj("lr_spike", 600, "injection_mult=10", "injection_span=20"), "lr_spike",
             "lr_spike", "injection", 600, "LR x10 for 20 steps"),
        Case("cb-random8-k600", 1, inj("corrupt_batch", 600, "injection_mode=random"), "bad_batch", "bad_batch",
             "injection", 600, "random ids, 8 of 8 rows"),
        Case("cb-shift8-k600", 1, inj("corrupt_batch", 600, "injection_mode=shift"), "bad_batch", "bad_batch",
             "injection", 600, "wrong-place cuts, 8 of 8 rows"),
        Case("cb-mismatch8-k600", 1, inj("corrupt_batch", 600, "injection_mode=mismatch"), "bad_batch", "bad_batch",
             "injection", 600, "mismatched targets, 8 of 8 rows"),
        Case("cb-random2-k1500", 1, inj("corrupt_batch", 1500, "injection_mode=random", "injection_rows=2"),
             "bad_batch", "bad_batch", "injection", 1500, "random ids, 2 of 8 rows"),
        Case("cb-mismatch2-k1500", 1, inj("corrupt_batch", 1500, "injection_mode=mismatch", "injection_rows=2"),
             "bad_batch", "bad_batch", "injection", 1500, "mismatched targets, 2 of 8 rows"),
        Case("stuck50-k600", 1, inj("stuck_loader", 600, "injection_span=50"), "stuck_loader", "stuck_loader",
             "injection", 600, "same batch 50 steps"),
        Case("leak-k600", 1, inj("target_leak", 600, "injection_span=0"), "target_leak", "target_leak", "injection",
             600, "inputs = targets to the end"),
        Case("leak-k1400", 1, inj("target_leak", 1400, "injection_span=0"), "target_leak", "target_leak",
             "injection", 1400, "inputs = targets to the end"),
        Case("leak-k0", 1, inj("target_leak", 0, "injection_span=0"), "target_leak", "target_leak", "injection", 0,
             "inputs = targets, the whole run"),
        Case("lrhigh10", 1, ["lr_max=0.003", "lr_min=0.0003"], "lr_too_high", "lr_too_high", "break",
             magnitude="LR x10 (3e-3)"),
        Case("lrhigh30", 1, ["lr_max=0.009", "lr_min=0.0009"], "lr_too_high", "lr_too_high", "break",
             magnitude="LR x30 (9e-3)"),
        Case("nomask", 1, ["causal_mask=false"], "broken_mask", "broken_mask", "break"),
        # a setting from step 0 leaves no change to see, and measured no spike: healthy is the honest answer
        Case("beta2-999", 1, ["beta2=0.999"], "healthy", "healthy", "oov", magnitude="beta2 0.999, whole run",
             oov=True),
        Case("beta2-9999", 1, ["beta2=0.9999"], "healthy", "healthy", "oov", magnitude="beta2 0.9999, whole run",
             oov=True),
        *[Case(f"adam-b2-{b2}{'-eps' + eps if eps else ''}-k300", 1,
               inj("adam_setting", 300, f"injection_beta2={b2}", *([f"injection_eps={eps}"] if eps else [])),
               "optimizer_setting", "optimizer_setting", "injection", 300,
               f"beta2 0.95 -> {b2}{', eps ' + eps if eps else ''} from K")
          for b2, eps in (("0.6", ""), ("0.8", ""), ("0.6", "1e-16"), ("0.9999", ""))],
        # the lab's three faults, and their edges, on seed 1
        *[Case(f"scale-x{s:g}-k{k}", 1, inj("scale", k, f"injection_scale={s}"), "gradient_explosion",
               "gradient_explosion", "injection", k, f"scale x{s:g}", borderline=s == 2)
          for s, k in ((50, 500), (5, 900), (2, 1100), (0.05, 1300), (200, 1750))],
        *[Case(f"bad_batch-{tag}-k{k}", 1, inj("bad_batch", k, f"injection_sentence={sent}"), "bad_batch",
               "bad_batch", "injection", k, f"{tag}: {sent}")
          for tag, sent, k in (("rare", RARE_SENTENCES[0], 500), ("common", COMMON_SENTENCE, 1000))],
        *[Case(f"v-{p}-x{f:g}-k{k}", 1, inj("v_corrupt", k, f"injection_param={p}", f"injection_factor={f}"),
               "optimizer_state_corruption", "healthy" if f == 1.001 else "optimizer_state_corruption", "injection",
               k, f"factor x{f:g}", p)
          for p, f, k in (("lm_head.bias", 100, 500), ("lm_head.bias", 0.01, 700), ("blocks.1.mlp.fc.weight", 1.05, 1200),
                          ("lm_head.bias", 1.001, 1600))],
        Case("break-init-x100", 1, ["init_scale=100", "steps=300"], "bad_init", "bad_init", "break"),
        Case("break-no-warmup", 1, ["warmup_steps=0", "steps=300"], "no_warmup", "no_warmup", "break"),
        Case("break-nonfinite", 1, ["steps=300", "lr_max=100", "lr_min=0", "warmup_steps=10", "grad_clip=0"],
             "non_finite", "non_finite", "break"),
        Case("lr-constant", 1, ["steps=300", "warmup_steps=0", "lr_min=0.0003"], "lr_schedule", "lr_schedule", "lr_bug"),
        Case("lr-zero", 1, ["steps=300", "lr_max=0", "lr_min=0"], "lr_schedule", "lr_schedule", "lr_bug"),
    ]
    for seed in (6, 7):
        cases.append(Case("clean", seed, [], "healthy", "healthy", "clean"))
        cases += fault_cases(seed)
    cases += [
        Case("lr-x10", 6, ["lr_max=0.003", "lr_min=0.0003"], "lr_too_high", "lr_too_high", "break",
             magnitude="LR x10 (3e-3)"),
        Case("lr-x30", 7, ["lr_max=0.009", "lr_min=0.0009"], "lr_too_high", "lr_too_high", "break",
             magnitude="LR x30 (9e-3)"),
        Case("lr-x3", 6, ["lr_max=0.0009", "lr_min=0.00009"], "lr_too_high", "lr_too_high", "break",
             magnitude="LR x3 (9e-4)", near_miss=True),
        Case("break-no-mask", 6, ["causal_mask=false"], "broken_mask", "broken_mask", "break"),
        Case("noclip/clean", 6, ["grad_clip=0"], "healthy", "healthy", "clean"),
        Case("noclip/scale-x50-k1500", 6, ["grad_clip=0", *inj("scale", 1500, "injection_scale=50")],
             "gradient_explosion", "gradient_explosion", "injection", 1500, "scale x50, clipping off"),
    ]
    cases += [*first_draw_suite(), *second_draw_suite()]
    for c in cases:
        c.split = "tuning"
    return cases


# ---------------------------------------------------------------------------------------------------
# held-out: other conditions (seeds 11-15); a group is one condition: a clean run and its forks
# ---------------------------------------------------------------------------------------------------

FIRST_DRAW_GROUPS = {
    # group: (seed, condition overrides, in words)
    "s11-batch4": (11, ["batch_size=4", "steps=1000", "spectral_every=0"], "batch 4, 1000 steps"),
    "s12-batch16": (12, ["batch_size=16", "steps=1000", "spectral_every=0"], "batch 16, 1000 steps"),
    "s13-warmup10-decay0": (13, ["warmup_steps=10", "lr_min=0", "steps=1000", "spectral_every=0"],
                            "warmup 10 steps, cosine to 0, 1000 steps"),
    "s14-warmup300-lr6e-4": (14, ["warmup_steps=300", "lr_max=0.0006", "lr_min=0.00006", "steps=1000",
                                  "spectral_every=0"], "warmup 300 steps, peak LR 6e-4, 1000 steps"),
    "s15-medium": (15, ["preset=medium", "steps=300", "warmup_steps=30", "eval_every=100", "spectral_every=0"],
                   "the medium preset (3.4M parameters, batch 16, context 64), 300 steps"),
}

# (group, name, injection sets, K, magnitude, near miss)
FIRST_DRAW_FAULTS = [
    # batch 4: K just after the warmup, in the middle, in the last steps
    ("s11-batch4", "scale-x20", ["injection=scale", "injection_scale=20"], 104, "scale x20 just after warmup", False),
    ("s11-batch4", "bad_batch-rare1", ["injection=bad_batch", f"injection_sentence={RARE_SENTENCES[1]}"], 610,
     "rare sentence x4 rows", False),
    ("s11-batch4", "v-lm_head.bias-x100", ["injection=v_corrupt", "injection_param=lm_head.bias",
                                            "injection_factor=100"], 985, "x100, 15 steps before the end", False),
    ("s11-batch4", "corrupt-mismatch1", ["injection=corrupt_batch", "injection_mode=mismatch", "injection_rows=1"], 700,
     "mismatched targets, 1 of 4 rows", False),
    ("s11-batch4", "stuck-10", ["injection=stuck_loader", "injection_span=10"], 420, "same batch 10 steps", False),
    ("s11-batch4", "lr_spike-x5-10", ["injection=lr_spike", "injection_mult=5", "injection_span=10"], 530,
     "LR x5 for 10 steps", False),
    ("s11-batch4", "adam-b2-0.8", ["injection=adam_setting", "injection_beta2=0.8"], 800, "beta2 0.95 -> 0.8", False),
    ("s11-batch4", "leak", ["injection=target_leak", "injection_span=0"], 300, "inputs = targets to the end", False),
    # batch 16: edges of visibility
    ("s12-batch16", "scale-x0.05", ["injection=scale", "injection_scale=0.05"], 950, "scale x0.05, 50 steps before the end",
     False),
    ("s12-batch16", "bad_batch-common", ["injection=bad_batch", f"injection_sentence={COMMON_SENTENCE}"], 205,
     "a common sentence x16 rows", False),
    ("s12-batch16", "v-qkv-x0.01", ["injection=v_corrupt", "injection_param=blocks.0.attn.qkv.weight",
                                     "injection_factor=0.01"], 640, "x0.01 on blocks.0.attn.qkv.weight", False),
    ("s12-batch16", "corrupt-random16", ["injection=corrupt_batch", "injection_mode=random"], 480,
     "random ids, 16 of 16 rows", False),
    ("s12-batch16", "corrupt-shift2", ["injection=corrupt_batch", "injection_mode=shift", "injection_rows=2"], 560,
     "wrong-place cuts, 2 of 16 rows", True),
    ("s12-batch16", "stuck-4", ["injection=stuck_loader", "injection_span=4"], 760, "same batch 4 steps (3 repeats)",
     False),
    ("s12-batch16", "lr_spike-x0.2-20", ["injection=lr_spike", "injection_mult=0.2", "injection_span=20"], 350,
     "LR x0.2 for 20 steps", False),
    ("s12-batch16", "adam-b2-0.99", ["injection=adam_setting", "injection_beta2=0.99"], 600, "beta2 0.95 -> 0.99",
     False),
    ("s12-batch16", "leak", ["injection=target_leak", "injection_span=0"], 500, "inputs = targets to the end", False),
    # warmup 10, cosine to 0
    ("s13-warmup10-decay0", "scale-x10", ["injection=scale", "injection_scale=10"], 12, "scale x10 two steps after warmup",
     False),
    ("s13-warmup10-decay0", "scale-x5", ["injection=scale", "injection_scale=5"], 450, "scale x5", False),
    ("s13-warmup10-decay0", "v-ln_f-x1.05", ["injection=v_corrupt", "injection_param=ln_f.weight",
                                              "injection_factor=1.05"], 400, "x1.05 on ln_f.weight", False),
    ("s13-warmup10-decay0", "bad_batch-rare2", ["injection=bad_batch", f"injection_sentence={RARE_SENTENCES[2]}"], 990,
     "rare sentence, 10 steps before the end", False),
    ("s13-warmup10-decay0", "corrupt-shift4", ["injection=corrupt_batch", "injection_mode=shift", "injection_rows=4"],
     300, "wrong-place cuts, 4 of 8 rows", False),
    ("s13-warmup10-decay0", "lr_spike-x2-5", ["injection=lr_spike", "injection_mult=2", "injection_span=5"], 550,
     "LR x2 for 5 steps", False),
    ("s13-warmup10-decay0", "adam-b2-0.9", ["injection=adam_setting", "injection_beta2=0.9"], 850, "beta2 0.95 -> 0.9",
     False),
    ("s13-warmup10-decay0", "stuck-2", ["injection=stuck_loader", "injection_span=2"], 700,
     "same batch 2 steps (one repeat)", True),
    # warmup 300, peak LR 6e-4: the lab's three, during and after the warmup
    ("s14-warmup300-lr6e-4", "scale-x50", ["injection=scale", "injection_scale=50"], 310, "scale x50", False),
    ("s14-warmup300-lr6e-4", "bad_batch-rare0", ["injection=bad_batch", f"injection_sentence={RARE_SENTENCES[0]}"], 500,
     "the lab's sentence x8 rows", False),
    ("s14-warmup300-lr6e-4", "v-lm_head.bias-x100", ["injection=v_corrupt", "injection_param=lm_head.bias",
                                                      "injection_factor=100"], 200, "x100 during the warmup", False),
    ("s14-warmup300-lr6e-4", "corrupt-random8", ["injection=corrupt_batch", "injection_mode=random"], 150,
     "random ids, 8 of 8 rows, during the warmup", False),
    ("s14-warmup300-lr6e-4", "stuck-20", ["injection=stuck_loader", "injection_span=20"], 900, "same batch 20 steps",
     False),
    ("s14-warmup300-lr6e-4", "lr_spike-x10-20", ["injection=lr_spike", "injection_mult=10", "injection_span=20"], 650,
     "LR x10 for 20 steps", False),
    # the medium preset: the lab's three and two more
    ("s15-medium", "scale-x50", ["injection=scale", "injection_scale=50"], 200, "scale x50", False),
    ("s15-medium", "bad_batch-rare0", ["injection=bad_batch", f"injection_sentence={RARE_SENTENCES[0]}"], 220,
     "the lab's sentence x16 rows", False),
    ("s15-medium", "v-lm_head.bias-x100", ["injection=v_corrupt", "injection_param=lm_head.bias",
                                            "injection_factor=100"], 240, "x100", False),
    ("s15-medium", "corrupt-random16", ["injection=corrupt_batch", "injection_mode=random"], 260, "random ids, 16 of 16",
     False),
    ("s15-medium", "lr_spike-x10-5", ["injection=lr_spike", "injection_mult=10", "injection_span=5"], 280,
     "LR x10 for 5 steps", False),
]

# whole-run faults: (name, seed, sets, cause, condition, near miss)
FIRST_DRAW_BREAKS = [
    ("break-init-x100-b16", 12, ["init_scale=100", "batch_size=16", "steps=200"], "bad_init", "init x100, batch 16", False),
    ("break-no-warmup-b4", 11, ["warmup_steps=0", "batch_size=4", "lr_min=0", "steps=300"], "no_warmup",
     "no warmup, batch 4, cosine to 0", False),
    ("break-no-mask-b16", 12, ["causal_mask=false", "batch_size=16", "steps=2000", "spectral_every=0"], "broken_mask",
     "all-ones mask, batch 16", False),
    ("break-nonfinite-b4", 13, ["lr_max=100", "lr_min=0", "warmup_steps=10", "grad_clip=0", "batch_size=4", "steps=100"],
     "non_finite", "LR 100, clipping off, batch 4", False),
    ("lr-constant-1e-3", 14, ["warmup_steps=0", "lr_max=0.001", "lr_min=0.001", "batch_size=16", "steps=300"],
     "lr_schedule", "constant LR 1e-3, batch 16", False),
    ("lr-zero-b4", 11, ["lr_max=0", "lr_min=0", "batch_size=4", "steps=200"], "lr_schedule", "LR 0, batch 4", False),
    ("lr-x10-b16", 12, ["lr_max=0.003", "lr_min=0.0003", "batch_size=16", "steps=1000", "spectral_every=0"],
     "lr_too_high", "LR x10 (3e-3), batch 16", False),
    ("lr-x30-warmup10", 13, ["lr_max=0.009", "lr_min=0", "warmup_steps=10", "steps=1000", "spectral_every=0"],
     "lr_too_high", "LR x30, warmup 10, cosine to 0", False),
]


# The second held-out draw (seeds 41-45): conditions neither the tuning runs nor the first draw used, defined
# before the whole-run rules were changed and scored once after they were final.
HELD_OUT_GROUPS = {
    "s41-batch6": (41, ["batch_size=6", "steps=1000", "spectral_every=0"], "batch 6, 1000 steps"),
    "s42-batch12-lr5e-4": (42, ["batch_size=12", "lr_max=0.0005", "lr_min=0.00005", "steps=1000", "spectral_every=0"],
                           "batch 12, peak LR 5e-4, 1000 steps"),
    "s43-warmup50-flat": (43, ["warmup_steps=50", "lr_min=0.0003", "steps=1000", "spectral_every=0"],
                          "warmup 50 steps, then a constant LR, 1000 steps"),
    "s44-warmup200-decay0-1500": (44, ["warmup_steps=200", "lr_min=0", "steps=1500", "spectral_every=0"],
                                  "warmup 200 steps, cosine to 0, 1500 steps"),
    "s45-medium-lr2e-4": (45, ["preset=medium", "steps=300", "warmup_steps=30", "eval_every=100", "lr_max=0.0002",
                               "lr_min=0.00002", "spectral_every=0"], "the medium preset at peak LR 2e-4, 300 steps"),
}

HELD_OUT_FAULTS = [
    ("s41-batch6", "scale-x30", ["injection=scale", "injection_scale=30"], 103, "scale x30, 3 steps after warmup", False),
    ("s41-batch6", "bad_batch-rare3", ["injection=bad_batch", f"injection_sentence={RARE_SENTENCES[3]}"], 640,
     "rare sentence x6 rows", False),
    ("s41-batch6", "v-lm_head.bias-x100", ["injection=v_corrupt", "injection_param=lm_head.bias",
                                            "injection_factor=100"], 992, "x100, 8 steps before the end", False),
    ("s41-batch6", "corrupt-mismatch2", ["injection=corrupt_batch", "injection_mode=mismatch", "injection_rows=2"], 520,
     "mismatched targets, 2 of 6 rows", False),
    ("s41-batch6", "stuck-6", ["injection=stuck_loader", "injection_span=6"], 380, "same batch 6 steps", False),
    ("s41-batch6", "lr_spike-x4-8", ["injection=lr_spike", "injection_mult=4", "injection_span=8"], 610,
     "LR x4 for 8 steps", False),
    ("s41-batch6", "adam-b2-0.7", ["injection=adam_setting", "injection_beta2=0.7"], 830, "beta2 0.95 -> 0.7", False),
    ("s41-batch6", "leak", ["injection=target_leak", "injection_span=0"], 450, "inputs = targets to the end", False),
    ("s42-batch12-lr5e-4", "scale-x0.02", ["injection=scale", "injection_scale=0.02"], 940, "scale x0.02", False),
    ("s42-batch12-lr5e-4", "bad_batch-common", ["injection=bad_batch", f"injection_sentence={COMMON_SENTENCE}"], 260,
     "a common sentence x12 rows", False),
    ("s42-batch12-lr5e-4", "v-qkv1-x0.01", ["injection=v_corrupt", "injection_param=blocks.1.attn.qkv.weight",
                                             "injection_factor=0.01"], 470, "x0.01 on blocks.1.attn.qkv.weight", False),
    ("s42-batch12-lr5e-4", "corrupt-random12", ["injection=corrupt_batch", "injection_mode=random"], 700,
     "random ids, 12 of 12 rows", False),
    ("s42-batch12-lr5e-4", "stuck-3", ["injection=stuck_loader", "injection_span=3"], 760, "same batch 3 steps", False),
    ("s42-batch12-lr5e-4", "lr_spike-x0.1-15", ["injection=lr_spike", "injection_mult=0.1", "injection_span=15"], 240,
     "LR x0.1 for 15 steps", False),
    ("s42-batch12-lr5e-4", "adam-b2-0.5", ["injection=adam_setting", "injection_beta2=0.5"], 560, "beta2 0.95 -> 0.5",
     False),
    ("s42-batch12-lr5e-4", "leak", ["injection=target_leak", "injection_span=0"], 820, "inputs = targets to the end",
     False),
    ("s43-warmup50-flat", "scale-x100", ["injection=scale", "injection_scale=100"], 52, "scale x100 after warmup", False),
    ("s43-warmup50-flat", "bad_batch-rare1", ["injection=bad_batch", f"injection_sentence={RARE_SENTENCES[1]}"], 975,
     "rare sentence, 25 steps before the end", False),
    ("s43-warmup50-flat", "v-ln_f-x20", ["injection=v_corrupt", "injection_param=ln_f.weight", "injection_factor=20"],
     300, "x20 on ln_f.weight", False),
    ("s43-warmup50-flat", "corrupt-shift8", ["injection=corrupt_batch", "injection_mode=shift"], 690,
     "wrong-place cuts, 8 of 8 rows", False),
    ("s43-warmup50-flat", "lr_spike-x3-30", ["injection=lr_spike", "injection_mult=3", "injection_span=30"], 480,
     "LR x3 for 30 steps", False),
    ("s43-warmup50-flat", "stuck-20", ["injection=stuck_loader", "injection_span=20"], 850, "same batch 20 steps", False),
    ("s43-warmup50-flat", "leak", ["injection=target_leak", "injection_span=0"], 200, "inputs = targets to the end", False),
    ("s44-warmup200-decay0-1500", "scale-x10", ["injection=scale", "injection_scale=10"], 1490,
     "scale x10, 10 steps before the end", False),
    ("s44-warmup200-decay0-1500", "bad_batch-rare0", ["injection=bad_batch", f"injection_sentence={RARE_SENTENCES[0]}"],
     1496, "the lab's sentence, 4 steps before the end", False),
    ("s44-warmup200-decay0-1500", "v-lm_head.bias-x100", ["injection=v_corrupt", "injection_param=lm_head.bias",
                                                           "injection_factor=100"], 1480, "the lab's x100, near the end",
     False),
    ("s44-warmup200-decay0-1500", "corrupt-mismatch8", ["injection=corrupt_batch", "injection_mode=mismatch"], 1000,
     "mismatched targets, 8 of 8 rows", False),
    ("s44-warmup200-decay0-1500", "lr_spike-x10-5", ["injection=lr_spike", "injection_mult=10", "injection_span=5"],
     1300, "LR x10 for 5 steps", False),
    ("s44-warmup200-decay0-1500", "adam-b2-0.6", ["injection=adam_setting", "injection_beta2=0.6"], 700,
     "beta2 0.95 -> 0.6", False),
    ("s44-warmup200-decay0-1500", "leak", ["injection=target_leak", "injection_span=0"], 1200,
     "inputs = targets, the last 300 steps", False),
    ("s45-medium-lr2e-4", "scale-x50", ["injection=scale", "injection_scale=50"], 100, "the lab's x50", False),
    ("s45-medium-lr2e-4", "bad_batch-rare0", ["injection=bad_batch", f"injection_sentence={RARE_SENTENCES[0]}"], 150,
     "the lab's sentence x16 rows", False),
    ("s45-medium-lr2e-4", "v-lm_head.bias-x100", ["injection=v_corrupt", "injection_param=lm_head.bias",
                                                   "injection_factor=100"], 180, "the lab's x100", False),
    ("s45-medium-lr2e-4", "corrupt-mismatch16", ["injection=corrupt_batch", "injection_mode=mismatch"], 230,
     "mismatched targets, 16 of 16 rows", False),
]

HELD_OUT_BREAKS = [
    ("break-no-mask-b6", 41, ["causal_mask=false", "batch_size=6", "steps=1500", "spectral_every=0"], "broken_mask",
     "all-ones mask, batch 6, 1500 steps", False),
    ("break-no-mask-b12-lr5e-4", 42, ["causal_mask=false", "batch_size=12", "lr_max=0.0005", "lr_min=0.00005",
                                      "steps=1000", "spectral_every=0"], "broken_mask",
     "all-ones mask, batch 12, peak LR 5e-4, 1000 steps", False),
    ("lr-x20-b6", 41, ["lr_max=0.006", "lr_min=0.0006", "batch_size=6", "steps=1000", "spectral_every=0"], "lr_too_high",
     "LR x20 (6e-3), batch 6", False),
    ("lr-x15-flat", 43, ["lr_max=0.0045", "lr_min=0.0045", "warmup_steps=50", "steps=1000", "spectral_every=0"],
     "lr_too_high", "LR x15 (4.5e-3), warmup 50, then constant", False),
    ("lr-x20-decay0-1500", 44, ["lr_max=0.006", "lr_min=0", "warmup_steps=200", "steps=1500", "spectral_every=0"],
     "lr_too_high", "LR x20, warmup 200, cosine to 0, 1500 steps", False),
    ("break-init-x100-b12", 42, ["init_scale=100", "batch_size=12", "steps=200"], "bad_init", "init x100, batch 12", False),
    ("break-no-warmup-b12", 42, ["warmup_steps=0", "batch_size=12", "steps=300"], "no_warmup", "no warmup, batch 12",
     False),
    ("break-nonfinite-b6", 41, ["lr_max=50", "lr_min=0", "warmup_steps=10", "grad_clip=0", "batch_size=6", "steps=100"],
     "non_finite", "LR 50, clipping off, batch 6", False),
    ("lr-constant-5e-4-b6", 43, ["warmup_steps=0", "lr_max=0.0005", "lr_min=0.0005", "batch_size=6", "steps=300"],
     "lr_schedule", "constant LR 5e-4, batch 6", False),
    ("lr-zero-b12", 44, ["lr_max=0", "lr_min=0", "batch_size=12", "steps=200"], "lr_schedule", "LR 0, batch 12", False),
]


# The third held-out draw (seeds 61-65): written down before the leak and mask rules were changed on the
# second draw (then moved to tuning), scored once after.
THIRD_DRAW_GROUPS = {
    "s61-batch10": (61, ["batch_size=10", "steps=1000", "spectral_every=0"], "batch 10, 1000 steps"),
    "s62-batch5-lr2e-4": (62, ["batch_size=5", "lr_max=0.0002", "lr_min=0.00002", "steps=1200", "spectral_every=0"],
                          "batch 5, peak LR 2e-4, 1200 steps"),
    "s63-warmup20-decay0-800": (63, ["warmup_steps=20", "lr_min=0", "steps=800", "spectral_every=0"],
                                "warmup 20 steps, cosine to 0, 800 steps"),
    "s64-warmup150-2500": (64, ["warmup_steps=150", "steps=2500", "spectral_every=0"], "warmup 150 steps, 2500 steps"),
    "s65-medium-b8": (65, ["preset=medium", "batch_size=8", "steps=300", "warmup_steps=30", "eval_every=100",
                           "spectral_every=0"], "the medium preset at batch 8, 300 steps"),
}

THIRD_DRAW_FAULTS = [
    ("s61-batch10", "scale-x40", ["injection=scale", "injection_scale=40"], 101, "scale x40, 1 step after warmup", False),
    ("s61-batch10", "bad_batch-rare2", ["injection=bad_batch", f"injection_sentence={RARE_SENTENCES[2]}"], 430,
     "rare sentence x10 rows", False),
    ("s61-batch10", "v-lm_head.bias-x50", ["injection=v_corrupt", "injection_param=lm_head.bias",
                                           "injection_factor=50"], 720, "x50", False),
    ("s61-batch10", "corrupt-random5", ["injection=corrupt_batch", "injection_mode=random", "injection_rows=5"], 610,
     "random ids, 5 of 10 rows", False),
    ("s61-batch10", "stuck-8", ["injection=stuck_loader", "injection_span=8"], 880, "same batch 8 steps", False),
    ("s61-batch10", "lr_spike-x6-6", ["injection=lr_spike", "injection_mult=6", "injection_span=6"], 330,
     "LR x6 for 6 steps", False),
    ("s61-batch10", "adam-b2-0.75", ["injection=adam_setting", "injection_beta2=0.75"], 500, "beta2 0.95 -> 0.75",
     False),
    ("s61-batch10", "leak", ["injection=target_leak", "injection_span=0"], 350, "inputs = targets to the end", False),
    ("s62-batch5-lr2e-4", "scale-x8", ["injection=scale", "injection_scale=8"], 700, "scale x8", False),
    ("s62-batch5-lr2e-4", "bad_batch-common", ["injection=bad_batch", f"injection_sentence={COMMON_SENTENCE}"], 900,
     "a common sentence x5 rows", False),
    ("s62-batch5-lr2e-4", "v-fc0-x0.02", ["injection=v_corrupt", "injection_param=blocks.0.mlp.fc.weight",
                                          "injection_factor=0.02"], 560, "x0.02 on blocks.0.mlp.fc.weight", False),
    ("s62-batch5-lr2e-4", "corrupt-shift5", ["injection=corrupt_batch", "injection_mode=shift"], 1190,
     "wrong-place cuts, 5 of 5 rows, 10 steps before the end", False),
    ("s62-batch5-lr2e-4", "stuck-12", ["injection=stuck_loader", "injection_span=12"], 300, "same batch 12 steps", False),
    ("s62-batch5-lr2e-4", "leak", ["injection=target_leak", "injection_span=0"], 650, "inputs = targets to the end",
     False),
    ("s63-warmup20-decay0-800", "scale-x25", ["injection=scale", "injection_scale=25"], 22, "scale x25 after warmup",
     False),
    ("s63-warmup20-decay0-800", "v-lm_head.bias-x100", ["injection=v_corrupt", "injection_param=lm_head.bias",
                                                         "injection_factor=100"], 790, "the lab's x100, 10 before the end",
     False),
    ("s63-warmup20-decay0-800", "bad_batch-rare0", ["injection=bad_batch", f"injection_sentence={RARE_SENTENCES[0]}"],
     400, "the lab's sentence", False),
    ("s63-warmup20-decay0-800", "lr_spike-x15-3", ["injection=lr_spike", "injection_mult=15", "injection_span=3"], 260,
     "LR x15 for 3 steps", False),
    ("s63-warmup20-decay0-800", "adam-b2-0.999", ["injection=adam_setting", "injection_beta2=0.999"], 450,
     "beta2 0.95 -> 0.999", False),
    ("s63-warmup20-decay0-800", "leak", ["injection=target_leak", "injection_span=0"], 500, "inputs = targets to the end",
     False),
    ("s64-warmup150-2500", "scale-x0.03", ["injection=scale", "injection_scale=0.03"], 2200, "scale x0.03", False),
    ("s64-warmup150-2500", "corrupt-mismatch4", ["injection=corrupt_batch", "injection_mode=mismatch",
                                                 "injection_rows=4"], 1800, "mismatched targets, 4 of 8 rows", False),
    ("s64-warmup150-2500", "stuck-30", ["injection=stuck_loader", "injection_span=30"], 1500, "same batch 30 steps",
     False),
    ("s64-warmup150-2500", "lr_spike-x0.3-40", ["injection=lr_spike", "injection_mult=0.3", "injection_span=40"], 2000,
     "LR x0.3 for 40 steps", False),
    ("s64-warmup150-2500", "leak", ["injection=target_leak", "injection_span=0"], 1600, "inputs = targets to the end",
     False),
    ("s65-medium-b8", "scale-x50", ["injection=scale", "injection_scale=50"], 120, "the lab's x50", False),
    ("s65-medium-b8", "bad_batch-rare0", ["injection=bad_batch", f"injection_sentence={RARE_SENTENCES[0]}"], 200,
     "the lab's sentence x8 rows", False),
    ("s65-medium-b8", "v-lm_head.bias-x100", ["injection=v_corrupt", "injection_param=lm_head.bias",
                                               "injection_factor=100"], 250, "the lab's x100", False),
]

THIRD_DRAW_BREAKS = [
    ("break-no-mask-b10-2000", 61, ["causal_mask=false", "batch_size=10", "steps=2000", "spectral_every=0"],
     "broken_mask", "all-ones mask, batch 10, 2000 steps", False),
    ("break-no-mask-decay0", 63, ["causal_mask=false", "warmup_steps=20", "lr_min=0", "steps=1500", "spectral_every=0"],
     "broken_mask", "all-ones mask, warmup 20, cosine to 0, 1500 steps", False),
    ("lr-x12-b10", 61, ["lr_max=0.0036", "lr_min=0.00036", "batch_size=10", "steps=1000", "spectral_every=0"],
     "lr_too_high", "LR x12 (3.6e-3), batch 10", False),
    ("lr-x40-decay0-800", 63, ["lr_max=0.012", "lr_min=0", "warmup_steps=20", "steps=1000", "spectral_every=0"],
     "lr_too_high", "LR x40, warmup 20, cosine to 0", False),
    ("break-init-x100-b5", 62, ["init_scale=100", "batch_size=5", "steps=200"], "bad_init", "init x100, batch 5", False),
    ("break-no-warmup-b10", 61, ["warmup_steps=0", "batch_size=10", "lr_min=0", "steps=300"], "no_warmup",
     "no warmup, batch 10, cosine to 0", False),
    ("break-nonfinite-b10", 61, ["lr_max=80", "lr_min=0", "warmup_steps=10", "grad_clip=0", "batch_size=10",
                                 "steps=100"], "non_finite", "LR 80, clipping off, batch 10", False),
    ("lr-constant-2e-4-b5", 62, ["warmup_steps=0", "lr_max=0.0002", "lr_min=0.0002", "batch_size=5", "steps=300"],
     "lr_schedule", "constant LR 2e-4, batch 5", False),
]


def _drawn(groups: dict, faults: list, breaks: list, breaks_group: str, split: str) -> list[Case]:
    """A draw of conditions: per group a clean run and the faults forked from it, then whole-run faults."""
    cases = []
    for group, (seed, sets, words) in groups.items():
        cases.append(Case("clean", seed, sets, "healthy", "healthy", "clean", group=group, condition=words))
    for group, name, extra, k, mag, near in faults:
        seed, sets, words = groups[group]
        cause = CAUSE_OF_INJECTION[extra[0].split("=", 1)[1]]
        cases.append(Case(f"{name}-k{k}", seed, [*sets, *extra, f"injection_step={k}"], cause, cause, "injection", k,
                          mag, group=group, condition=words, near_miss=near))
    for name, seed, sets, cause, words, near in breaks:
        cases.append(Case(name, seed, sets, cause, cause, "lr_bug" if cause == "lr_schedule" else "break",
                          magnitude=words, group=breaks_group, condition=words, near_miss=near))
    for c in cases:
        c.split = split
    return cases


def first_draw_suite() -> list[Case]:
    """The first held-out draw (seeds 11-15), scored once, then looked at while the whole-run rules (§2.5, §3.2,
    §3.4) were made scale-aware: tuning data from then on."""
    return _drawn(FIRST_DRAW_GROUPS, FIRST_DRAW_FAULTS, FIRST_DRAW_BREAKS, "held-out-breaks", "tuning")


def second_draw_suite() -> list[Case]:
    """The second held-out draw (seeds 41-45), scored once, then looked at while the target-leak and broken-mask
    rules were changed: tuning data from then on."""
    return _drawn(HELD_OUT_GROUPS, HELD_OUT_FAULTS, HELD_OUT_BREAKS, "held-out-2-breaks", "tuning")


def held_out_suite() -> list[Case]:
    return _drawn(THIRD_DRAW_GROUPS, THIRD_DRAW_FAULTS, THIRD_DRAW_BREAKS, "held-out-3-breaks", "held-out")


# ---------------------------------------------------------------------------------------------------
# out of the vocabulary: ordinary training setups that are not registered faults
# ---------------------------------------------------------------------------------------------------

SMALL_CORPUS = "val_verbs=[walk,talk,want,see,eat,go,write,play,work,study]"  # half the verbs held out of training

OOV_CONDITIONS = {  # name: (seed, sets, in words)
    "batch-2": (21, ["batch_size=2"], "batch size 2 (default 8)"),
    "weight-decay-1": (22, ["weight_decay=1.0"], "weight decay 1.0 (default 0.1)"),
    "beta1-0.5": (23, ["beta1=0.5"], "Adam beta1 0.5 (default 0.9)"),
    "init-x0.3": (24, ["init_scale=0.3"], "initialisation x0.3"),
    "context-20": (25, ["context=20"], "context 20 tokens (default 32): the longer rows dropped"),
    "small-model": (26, ["n_layer=1", "d_model=32", "n_head=2", "d_ff=128"], "1 layer, d_model 32"),
    "small-corpus": (27, [SMALL_CORPUS], "half the verbs held out: a corpus half the size"),
    "corpus-redrawn": (28, ["corpus_seed=7"], "the corpus drawn with another seed"),
    "clip-0.1": (29, ["grad_clip=0.1"], "gradient clipping at 0.1 (default 1.0)"),
}

# the first sealed set: scored once after the first rules were final, looked at since (so: oov)
OOV_FIRST_SEALED = {
    "batch-3-lr1e-3": (31, ["batch_size=3", "lr_max=0.001", "lr_min=0.0001"], "batch 3 with peak LR 1e-3"),
    "weight-decay-0": (32, ["weight_decay=0"], "no weight decay"),
    "beta2-0.8": (33, ["beta2=0.8"], "Adam beta2 0.8 for the whole run"),
    "wide": (34, ["d_model=128", "n_head=8", "d_ff=512"], "d_model 128, 8 heads"),
    "eps-1e-4": (35, ["eps=0.0001"], "Adam eps 1e-4 (default 1e-8)"),
}

# defined before the whole-run rules were changed, run once only after they were final (docs/diagnosis.md)
OOV_SEALED = {
    "batch-24": (51, ["batch_size=24"], "batch size 24"),
    "lr-x2": (52, ["lr_max=0.0006", "lr_min=0.00006"], "peak LR 6e-4 (x2 the default)"),
    "four-layers": (53, ["n_layer=4"], "4 layers (default 2)"),
    "warmup-500": (54, ["warmup_steps=500"], "warmup 500 steps"),
    "corpus-x2": (55, ["corpus_scale=2"], "a corpus twice the size"),
    "qk-norm": (56, ["qk_norm=true"], "qk-layernorm on (an intervention, not a fault)"),
}

OOV_STEPS = ["steps=1000", "spectral_every=0"]


def _oov(conditions: dict, split: str, group: str) -> list[Case]:
    return [Case(name, seed, [*OOV_STEPS, *sets], "healthy", "healthy", "oov", split=split, oov=True,
                 group=group, condition=words) for name, (seed, sets, words) in conditions.items()]


def oov_suite() -> list[Case]:
    return [*_oov(OOV_CONDITIONS, "oov", "oov"), *_oov(OOV_FIRST_SEALED, "oov", "oov-sealed")]


def oov_sealed_suite() -> list[Case]:
    return _oov(OOV_SEALED, "oov-sealed", "oov-sealed-2")


# ---------------------------------------------------------------------------------------------------
# quick: 200-step runs, the pipeline and the clear-cut leaves (tests/test_stability.py)
# ---------------------------------------------------------------------------------------------------


def _k(slot: int, seed: int) -> int:
    return [30 + 7 * seed, 90 + 11 * seed, 150 + 9 * seed][slot]


def quick_suite() -> list[Case]:
    """Short runs (200 steps): the pipeline and the clear-cut leaves, in about a minute of CPU."""
    cases = [Case("clean", s, [], "healthy", "healthy", "clean") for s in (1, 2)]
    seed = 1
    inj = [("scale", 50, None, 1), ("scale", 0.01, None, 2), ("bad_batch", None, None, 0),
           ("v_corrupt", 100, "lm_head.bias", 2), ("v_corrupt", 0.01, "blocks.0.attn.qkv.weight", 1),
           ("v_corrupt", 100, "lm_head.bias", None)]  # at step 0: Adam has no state yet, a no-op: no trace
    for name, mag, param, slot in inj:
        k = _k(slot, seed) if slot is not None else 0
        sets = [f"injection={name}", f"injection_step={k}"]
        if name == "scale":
            sets.append(f"injection_scale={mag}")
        if name == "v_corrupt":
            sets += [f"injection_factor={mag}", f"injection_param={param}"]
        truth = CAUSE_OF_INJECTION[name]
        expect = "healthy" if k == 0 else truth
        tag = f"-x{mag:g}" if mag is not None else ""
        folder = f"{name}{tag}-k{k}" if k else f"{name}-at-step0{tag}"
        cases.append(Case(folder, seed, sets, truth, expect, "injection", k,
                          f"{'scale' if name == 'scale' else 'factor'} x{mag:g}" if mag else "rare", param or ""))
    cases += [Case("break-init-x100", seed, ["init_scale=100"], "bad_init", "bad_init", "break"),
              Case("break-no-warmup", seed, ["warmup_steps=0"], "no_warmup", "no_warmup", "break"),
              Case("break-nonfinite", seed, ["lr_max=100", "lr_min=0", "warmup_steps=10", "grad_clip=0"],
                   "non_finite", "non_finite", "break"),
              Case("lr-constant", seed, ["warmup_steps=0", "lr_min=0.0003"], "lr_schedule", "lr_schedule", "lr_bug"),
              Case("lr-zero", seed, ["lr_max=0", "lr_min=0"], "lr_schedule", "lr_schedule", "lr_bug"),
              # out of the vocabulary, cheap: a batch of 2 must not be named a registered cause
              Case("oov-batch-2", 3, ["batch_size=2"], "healthy", "healthy", "oov", magnitude="batch 2", oov=True,
                   group="quick-oov")]
    return cases
