"""What a blind run's files withhold until the reveal (the loop calls these when `cfg.blind`).

The injection and break fields in manifest.json and config.yaml, the config and trunk hashes, the injection
record, each metrics row's `injected` field and the batch's row indices. The sealed lab that knows the truth
is minitrain/lab/blind.py.
"""
from __future__ import annotations

from minitrain.core.config import INJECTION_FIELDS

WITHHELD = "withheld until the reveal (blind run)"
BREAK_FIELDS = ("init_scale", "warmup_steps", "causal_mask")
SECRET_FIELDS = INJECTION_FIELDS + BREAK_FIELDS


def public_config(cfg) -> dict:
    """The config as config.yaml / manifest.json show it: without the secret fields when blind."""
    d = cfg.to_dict()
    if cfg.blind:
        for k in SECRET_FIELDS:
            d.pop(k, None)
    return d


def withhold_manifest(manifest: dict, cfg) -> dict:
    out = dict(manifest)
    out["config"] = public_config(cfg)
    out["config_hash"] = out["trunk_hash"] = WITHHELD
    out["injection"] = {"withheld": WITHHELD}
    out["forked_from"] = None  # blind runs are never forked, but say nothing either way
    return out


def withhold_checkpoint_meta(meta: dict) -> dict:
    return {**meta, "config_hash": WITHHELD, "trunk_hash": WITHHELD, "injection_fired": WITHHELD}


def withhold_row(row: dict) -> dict:
    row["injected"] = None
    if isinstance(row.get("batch"), dict):
        # every step alike: an injected batch has no training-row indices; the count stays (batch size)
        row["batch"]["rows"] = [None] * len(row["batch"].get("rows") or [])
    return row
