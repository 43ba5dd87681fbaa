"""The dashboard's panels: one registry that numbers them, so the page and stability-check.md say the same.

Panels 1-7 carry the course's numbers and titles, in the course's order (the stability check's "panel 3" is
the pre-clip gradient norm); every further panel is numbered from 8 on. Data only: the tree cites a panel
with `cite(key)`, the page draws each entry under "N. title" with `unit` as its y-axis title, and a panel's
`signals` name the metrics.jsonl fields it plots (docs/metrics.md): `params.X` is the per-tensor statistic X,
`batch.X` a batch-composition field, `baseline.X` the difference to a baseline run, `check.X` a quantity
the stability tree computes from the metrics (analysis) rather than one the run logged.

A panel's `series` say what the page draws, one `Series` per line or family of lines (per step, per
sample, per layer, per tensor), with its label, colour and style; `refs`, `note`, `y_range`, `strip` and
`wide` say the rest. The page script (views/assets/panels.js) reads these specs from the page data and
never chooses a panel's lines by its key.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from minitrain.analysis.thresholds import T


@dataclass(frozen=True)
class Series:
    """One line, or one family of lines, that a panel draws: what the page script (views/assets/panels.js)
    reads, so that no panel's series are chosen in the script. `signal` is one of its panel's signals."""
    signal: str
    label: str  # legend label; a family's lines add "layer i" or are named by their tensor
    color: str = ""  # "" for a family: one palette colour per layer or tensor
    per: str = "step"  # "step": a value per step; "sample": measured at some steps (points, joined);
    #                    "layer": one line per layer; "tensor": one line per tensor (this run only)
    smooth: bool = False  # drawn faded under its EMA while the smoothing slider is above 0
    width: float = 1.4
    own: bool = False  # this run only, never for the baseline or a compared run
    dash_others: bool = False  # dashed when drawn for another run (its colour alone does not tell it apart)
    divide_by: str = ""  # a page config field every value is divided by (a count made a share)
    span: bool = False  # measured on detail steps only: joined across the steps between


@dataclass(frozen=True)
class Panel:
    number: int
    key: str  # stable id: the page's element id is panel-<key>
    title: str
    unit: str  # the y-axis title, with its unit
    signals: tuple[str, ...]
    series: tuple[Series, ...] = ()
    log: bool = False  # log y axis by default (the page has a toggle)
    needs: str = ""  # "" always drawn; "baseline": only with a baseline run; "params": only with full telemetry;
    #                  "measured": only when the run carries its first series' signal (natural_signals)
    y_range: str = "data"  # "data": around the data; "zero": from 0; "symmetric": around 0, never narrower
    #                        than float rounding (a difference)
    refs: tuple[str, ...] = ()  # reference lines, by name (the page script's table of reference lines)
    note: str = ""  # the line under the title, by name (the page script's table of notes)
    strip: str = ""  # a 0/1 signal marked along the bottom at every step where it is 1
    wide: bool = False  # a full-width, taller panel whose marker labels are written out
    empty: str = "no data for this panel in this run"  # said when the run has nothing to draw

    def __post_init__(self):
        stray = [s.signal for s in self.series if s.signal not in self.signals]
        if stray or (self.strip and self.strip not in self.signals):
            raise ValueError(f"panel {self.key}: {stray or self.strip} not among its signals {self.signals}")


BLUE, ORANGE, GREEN, PURPLE, RED_VIOLET = "#1a5fb4", "#e66100", "#2da44e", "#8250df", "#9467bd"
NO_BATCH = "no batch data"

PANELS: tuple[Panel, ...] = (
    Panel(1, "loss", "Loss: train and validation", "loss (nats)", ("loss", "val_loss"), log=True, wide=True,
          series=(Series("loss", "train loss", BLUE, smooth=True),
                  Series("val_loss", "validation", ORANGE, per="sample", width=1.6)),
          refs=("ngram", "untrained")),
    Panel(2, "lr", "Learning rate", "learning rate", ("lr",), y_range="zero",
          series=(Series("lr", "learning rate", BLUE),)),
    Panel(3, "grad", "Gradient norm before clipping", "global L2 norm", ("grad_norm", "grad_norm_clipped", "clipped"),
          series=(Series("grad_norm", "before clipping", BLUE),
                  Series("grad_norm_clipped", "after clipping", GREEN, width=1.6, own=True)),
          y_range="zero", refs=("clip",), note="clipping", strip="clipped", wide=True),
    Panel(4, "act", "Mean absolute activation per layer", "mean |activation|", ("act",),
          series=(Series("act", "layer", per="layer", dash_others=True),)),
    Panel(5, "sigma", "Largest singular value of weight matrices", "\u03c3max", ("sigma",), log=True, needs="params",
          series=(Series("sigma", "", per="tensor"),)),
    Panel(6, "ur", "Update-to-weight ratio per tensor", "|\u0394w| / |w|", ("params.ur",), log=True, needs="params",
          series=(Series("params.ur", "", per="tensor"),), note="movers"),
    Panel(7, "classes", "Loss per class: regular vs irregular verbs", "loss (nats)",
          ("loss_regular", "loss_irregular"), log=True,
          series=(Series("loss_regular", "regular verbs", "#1a7f37", smooth=True),
                  Series("loss_irregular", "irregular verbs", PURPLE, smooth=True, dash_others=True))),
    Panel(8, "logits", "Largest output logit", "max |logit|", ("logit_max",),
          series=(Series("logit_max", "max |logit|", RED_VIOLET),)),
    Panel(9, "g", "Gradient norm per tensor (before clipping)", "L2 norm", ("params.g",), log=True, needs="params",
          series=(Series("params.g", "", per="tensor"),), note="movers"),
    Panel(10, "vm", "Adam second moment per tensor (mean of v)", "mean v (gradient\u00b2)", ("params.vm",), log=True,
          needs="params", series=(Series("params.vm", "", per="tensor"),), note="movers"),
    Panel(11, "batch-shares", "Batch composition: shares", "share of the batch",
          ("batch.dup_rows", "batch.rare_share", "batch.top_token_share"), y_range="zero", empty=NO_BATCH,
          series=(Series("batch.dup_rows", "duplicated rows / batch size", "#000000", own=True, divide_by="batch_size"),
                  Series("batch.rare_share", "rare-token share", ORANGE, own=True),
                  Series("batch.top_token_share", "largest single-token share", BLUE, own=True))),
    Panel(12, "batch-counts", "Batch composition: distinct tokens", "distinct tokens", ("batch.distinct_tokens",),
          series=(Series("batch.distinct_tokens", "distinct tokens in the batch", BLUE, own=True),), empty=NO_BATCH),
    Panel(13, "diff-loss", "Difference to the baseline: loss", "\u0394 loss (nats)",
          ("baseline.loss", "baseline.val_loss"),
          needs="baseline", y_range="symmetric", refs=("zero", "rounding"), note="difference",
          series=(Series("baseline.loss", "train loss difference", PURPLE),
                  Series("baseline.val_loss", "validation difference", ORANGE, per="sample"))),
    Panel(14, "diff-grad", "Difference to the baseline: gradient norm", "\u0394 L2 norm", ("baseline.grad_norm",),
          needs="baseline", y_range="symmetric", refs=("zero", "rounding"), note="difference",
          series=(Series("baseline.grad_norm", "pre-clip grad norm difference", PURPLE),)),
    Panel(15, "v-factor", "Adam v change beyond what g\u00b2 explains", "factor f (farthest from 1)",
          ("check.v_factor",), log=True, needs="params", refs=("v_factor_band",), note="v_factor",
          series=(Series("check.v_factor", "f of the tensor farthest from 1", PURPLE),)),
    Panel(16, "g-all", "Gradient jump shared by every tensor", "robust z (own noise σ)",
          ("check.g_all_up", "check.g_all_down"), log=False, needs="params", refs=("g_all_thresholds",), note="g_all",
          series=(Series("check.g_all_up", "smallest over tensors (\u00a77.1)", BLUE),
                  Series("check.g_all_down", "largest over tensors (\u00a77.2)", ORANGE))),
)

PANELS += (
    # the natural-instability signals (Wortsman et al. 2023, 2023b; docs/natural-instabilities.md), on detail steps
    Panel(17, "attn-logit", "Largest pre-softmax attention logit per layer", "max q\u00b7k/\u221ad_head",
          ("attn_logit_max",), log=True, needs="measured", refs=("attn_logit_high",),
          series=(Series("attn_logit_max", "layer", per="layer", dash_others=True, span=True),)),
    Panel(18, "attn-entropy", "Smallest attention entropy over heads, per layer", "entropy (nats)",
          ("attn_entropy_min",), y_range="zero", needs="measured", refs=("attn_entropy_low",),
          series=(Series("attn_entropy_min", "layer", per="layer", dash_others=True, span=True),)),
    Panel(19, "logz", "Output log Z (logsumexp of the logits) and mean logit", "nats",
          ("logz_mean", "logz_max", "logit_mean"), needs="measured", refs=("zero", "logz_far"),
          series=(Series("logz_mean", "mean log Z over targets", BLUE, span=True),
                  Series("logz_max", "largest log Z", ORANGE, span=True, dash_others=True),
                  Series("logit_mean", "mean logit", GREEN, span=True, dash_others=True))),
    Panel(20, "rms", "Update RMS per tensor: sqrt(mean(g\u00b2 / v\u0302))", "RMS (1 = v tracks g\u00b2)",
          ("params.r",), log=True, needs="params", refs=("rms_high",), note="movers",
          series=(Series("params.r", "", per="tensor"),)),
)

BY_KEY: dict[str, Panel] = {p.key: p for p in PANELS}


def cite(*keys: str) -> str:
    """How the stability check names panels: "panel 3 'Gradient norm before clipping'" (joined by "and")."""
    return " and ".join(f"panel {BY_KEY[k].number} '{BY_KEY[k].title}'" for k in keys)


def tensor_stats() -> list[str]:
    """The per-tensor statistics the page plots (params.X signals), in panel order."""
    return [s.split(".", 1)[1] for p in PANELS for s in p.signals if s.startswith("params.")]


def batch_stats() -> list[str]:
    """The batch-composition fields the page plots (batch.X signals), in panel order."""
    return [s.split(".", 1)[1] for p in PANELS for s in p.signals if s.startswith("batch.")]


def reference_values() -> dict[str, float]:
    """The tree's thresholds that panels draw as reference lines (refs of the same name)."""
    return {name: T[name] for name in ("attn_logit_high", "attn_entropy_low", "logz_far", "rms_high")}


def as_json() -> list[dict]:
    return [asdict(p) for p in PANELS]
