"""THE rule for "already trained, up to date": the one answer the lab, explore, lr-sweep and the replays
give before training a run again."""
from __future__ import annotations

from pathlib import Path

from minitrain.run import reader


def completed(run: Path, cfg, stop: int | None = None, forked_from: tuple[Path, int] | None = None) -> bool:
    """RUN holds this exact config (by hash) and it ended: non-finite, or trained to `stop` (default: the
    config's steps; a run stops at the config's steps at the latest). `forked_from` (run, step): it must also
    have started from that run's checkpoint (a replay)."""
    manifest, results = reader.manifest_of(run), reader.results_of(run)
    if not manifest or manifest.get("config_hash") != cfg.hash():
        return False
    if forked_from is not None and (manifest.get("forked_from") or {}) != {
            "run": Path(forked_from[0]).name, "checkpoint_step": forked_from[1]}:
        return False
    if results.get("status") == "non_finite":
        return True
    return results.get("status") in ("stopped", "finished") and \
        results.get("steps_done") == min(cfg.steps if stop is None else stop, cfg.steps)
