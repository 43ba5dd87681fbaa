"""Where a fork starts: the donor run (a sibling folder whose config differs only in injection settings) and
its checkpoint, found, verified and recorded. An injection run forked at K shares steps 0..K-1 with its
baseline; a fork killed before its first own checkpoint forks again from the same donor, checked unchanged."""
from __future__ import annotations

from pathlib import Path

from minitrain.core.config import TrainConfig
from minitrain.core.errors import UserError
from minitrain.run import files, reader

NOT_FORKED = {"forked_from": None, "forked_from_checksums": None}  # the manifest's fork fields of a run from scratch


def find_donor(cfg: TrainConfig, out: Path) -> tuple[Path, int] | None:
    """An existing run beside `out` whose config differs only in injection settings and that holds a
    checkpoint at or before K (its rows before K are then ours too). Prefer the latest such checkpoint."""
    if cfg.injection == "none":
        return None
    best: tuple[Path, int] | None = None
    for manifest_path in sorted(Path(out).parent.glob(f"*/{reader.MANIFEST}")):
        donor = manifest_path.parent
        if donor.resolve() == Path(out).resolve():
            continue
        m = reader.manifest_of(donor)  # {} when unreadable: no trunk hash, not a donor
        if m.get("trunk_hash") != cfg.trunk_hash():
            continue
        donor_k = m.get("config", {}).get("injection_step", 0) if m.get("config", {}).get("injection", "none") != "none" else None
        for step in reversed(files.list_checkpoints(donor)):
            # a donor's checkpoint is ours if it predates both our K and the donor's own injection
            if step <= cfg.injection_step and (donor_k is None or step <= donor_k):
                if best is None or step > best[1]:
                    best = (donor, step)
                break
    return best


def load_donor(cfg: TrainConfig, donor_dir: Path, step: int,
               same_trunk: bool = True) -> tuple[dict, dict, dict, bytes]:
    """A fork's donor checkpoint, verified: its files match their sha256, the donor's metrics hold steps
    0..step-1 unchanged, and (`same_trunk`: an automatic fork) it was made with our config but the injection.
    (`remediate` names its donor itself: its config differs by the remedy, inactive before the remedy step.)
    Returns weights, optimizer tensors, checkpoint manifest and the rows to copy; a mismatch is one line."""
    path = files.checkpoint_dir(donor_dir, step)
    weights, opt_t, meta = files.load_checkpoint(path)
    if same_trunk and meta.get("trunk_hash") != cfg.trunk_hash():
        raise UserError(f"checkpoint {path} was made with another config than this run's (trunk hash "
                                 f"{meta.get('trunk_hash')} != {cfg.trunk_hash()}); fork from another run or pass --no-fork")
    metrics = Path(donor_dir) / "metrics.jsonl"
    try:
        rows = files.verify_metrics_prefix(metrics, meta, path)
    except UserError as e:
        raise UserError(f"cannot fork from {donor_dir}: {e}; or pass --no-fork") from None
    return weights, opt_t, meta, rows


def recorded_donor(out: Path, recorded: dict) -> tuple[Path, int]:
    """The donor folder (a sibling of OUT) and checkpoint step a fork's manifest records; a value minitrain
    never writes (a path, a step that is no count) is refused in one line rather than read or followed."""
    name, step = recorded.get("run"), recorded.get("checkpoint_step")
    if not isinstance(name, str) or name in (".", "..") or Path(name).name != name or \
            not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise UserError(f"{out / 'manifest.json'} records a damaged fork origin (forked_from = "
                              f"{str(recorded)[:80]}); restore the manifest, or start the run over with --force")
    return out.parent / name, step


def fork_record(donor_dir: Path, step: int, meta: dict) -> dict:
    """The manifest's fields of a fork: `forked_from` (the donor run and checkpoint) and
    `forked_from_checksums`, what identifies that checkpoint's contents (its files' sha256, the sha256 of the
    rows before it, its trunk hash). A resume that forks again checks the donor still holds exactly this
    (check_donor_unchanged)."""
    return {"forked_from": {"run": Path(donor_dir).name, "checkpoint_step": step},
            "forked_from_checksums": {"sha256": meta.get("sha256"), "metrics_sha256": meta.get("metrics_sha256"),
                                      "trunk_hash": meta.get("trunk_hash")}}


def check_donor_unchanged(out: Path, recorded: dict, meta: dict, path: Path) -> None:
    """A fork killed before its first own checkpoint is resumed by forking again: its donor checkpoint
    must be the one it forked from, or the resumed rows would come from another run than its config says.
    Refused in one line when the donor was re-made or edited since (or records no checksums to compare)."""
    def identity(rec: dict) -> dict:  # a checkpoint manifest and the record share these keys
        sums = rec.get("sha256") or {}
        return {"model.safetensors": sums.get("model.safetensors"), "rows before it": rec.get("metrics_sha256"),
                "optimizer.safetensors": sums.get("optimizer.safetensors"), "trunk hash": rec.get("trunk_hash")}

    now, then = identity(meta), identity(recorded)
    remake = f"re-make it with 'minitrain train --out {out} --config {out / reader.CONFIG} --force'"
    if any(v is None for v in then.values()):
        raise UserError(f"cannot resume {out}: its manifest records no checksums of its donor checkpoint "
                              f"{path}, so the donor cannot be checked; {remake}")
    changed = [what for what in now if then[what] != now[what]]
    if changed:
        raise UserError(
            f"cannot resume {out}: its donor checkpoint {path} changed since this run forked from it "
            f"({', '.join(changed)} differ{'s' if len(changed) == 1 else ''}: the donor was re-made or edited), "
            f"so its rows would come from another run; {remake}")

