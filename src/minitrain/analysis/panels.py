"""The dashboard's panels: one registry that numbers them, so the page and stability-check.md say the same.

Panels 1-7 carry the course's numbers and titles, in the course's order (the stability check's "panel 3" is
the pre-clip gradient norm); every further panel is numbered from 8 on. Data only: the tree cites a panel
with `cite(key)`, the page draws each entry under "N. title" with `unit` as its y-axis title, and a panel's
`signals` name the metrics.jsonl fields it plots (docs/metrics.md): `params.X` is the per-tensor statistic X,
`batch.X` a batch-composition field, `baseline.X` the difference to a baseline run, `check.X` a quantity
the stability tree computes from the metrics (analysis) rather than one the run logged.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Panel:
    number: int
    key: str  # stable id: the page's element id is panel-<key>
    title: str
    unit: str  # the y-axis title, with its unit
    signals: tuple[str, ...]
    log: bool = False  # log y axis by default (the page has a toggle)
    needs: str = ""  # "" always drawn; "baseline": only with a baseline run; "params": only with full telemetry


PANELS: tuple[Panel, ...] = (
    Panel(1, "loss", "Loss: train and validation", "loss (nats)", ("loss", "val_loss"), log=True),
    Panel(2, "lr", "Learning rate", "learning rate", ("lr",)),
    Panel(3, "grad", "Gradient norm before clipping", "global L2 norm", ("grad_norm", "grad_norm_clipped", "clipped")),
    Panel(4, "act", "Mean absolute activation per layer", "mean |activation|", ("act",)),
    Panel(5, "sigma", "Largest singular value of weight matrices", "\u03c3max", ("sigma",), log=True, needs="params"),
    Panel(6, "ur", "Update-to-weight ratio per tensor", "|\u0394w| / |w|", ("params.ur",), log=True, needs="params"),
    Panel(7, "classes", "Loss per class: regular vs irregular verbs", "loss (nats)",
          ("loss_regular", "loss_irregular"), log=True),
    Panel(8, "logits", "Largest output logit", "max |logit|", ("logit_max",)),
    Panel(9, "g", "Gradient norm per tensor (before clipping)", "L2 norm", ("params.g",), log=True, needs="params"),
    Panel(10, "vm", "Adam second moment per tensor (mean of v)", "mean v (gradient\u00b2)", ("params.vm",), log=True,
          needs="params"),
    Panel(11, "batch-shares", "Batch composition: shares", "share of the batch",
          ("batch.dup_rows", "batch.rare_share", "batch.top_token_share")),
    Panel(12, "batch-counts", "Batch composition: distinct tokens", "distinct tokens", ("batch.distinct_tokens",)),
    Panel(13, "diff-loss", "Difference to the baseline: loss", "\u0394 loss (nats)", ("baseline.loss", "baseline.val_loss"),
          needs="baseline"),
    Panel(14, "diff-grad", "Difference to the baseline: gradient norm", "\u0394 L2 norm", ("baseline.grad_norm",),
          needs="baseline"),
    Panel(15, "v-factor", "Adam v change beyond what g\u00b2 explains", "factor f (farthest from 1)",
          ("check.v_factor",), log=True, needs="params"),
    Panel(16, "g-all", "Gradient jump shared by every tensor", "g / trailing median",
          ("check.g_all_up", "check.g_all_down"), log=True, needs="params"),
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


def as_json() -> list[dict]:
    return [asdict(p) for p in PANELS]
