"""Writing a run folder, one job per module; every write is atomic.

    RUN/
      manifest.json      what the run is and how it went (written by run/record.py)
      config.yaml        the resolved config (train it again with `minitrain train --config RUN/config.yaml`)
      tokenizer.json     the BPE tokenizer trained for this run
      metrics.jsonl      one JSON object per step (written in blocks: metrics.py)
      results.json       how it ended: final train/val loss against the n-gram baseline (run/record.py)
      checkpoints/step-000500/   state *before* step 500 runs (steps 0..499 done)
          model.safetensors       weights
          optimizer.safetensors   Adam moments: exp_avg.<name>, exp_avg_sq.<name>, step.<name>
          manifest.json           step, config hash, metrics byte offset, scheduler / data / RNG state

    atomic.py       atomic writes, strict JSON, the one line a failed write becomes
    lock.py         the run's lock (RUN/.lock)
    folder.py       creating, emptying and deleting a run folder; minitrain's files and anyone else's
    metrics.py      metrics.jsonl's writer
    checkpoints.py  checkpoints: write, load and verify, prune, restore

Never pickle: tensors go through safetensors, everything else through JSON. The names below are the
package's interface (`files.atomic_write_json`, `files.save_checkpoint`, ...).
"""
from minitrain.run.files.atomic import (TMP_SUFFIX, atomic_write_bytes, atomic_write_json, atomic_write_text,
                                        disk_error, strict_json, write_config_yaml, write_synced)
from minitrain.run.files.checkpoints import (CHECKPOINTS, CKPT_PREFIX, checkpoint_dir, checkpoints_to_keep,
                                             list_checkpoints, load_checkpoint, optimizer_tensors, prune_checkpoints,
                                             restore, save_checkpoint, verify_metrics_prefix)
from minitrain.run.files.folder import (RUN_FILES, claim_run_dir, clean_temporaries, clear_run_dir, foreign_files,
                                        is_minitrain_run, is_run_dir, refuse_foreign_files, refuse_links,
                                        remove_run_dir)
from minitrain.run.files.lock import RunLock, lock_run, refuse_if_live
from minitrain.run.files.metrics import MetricsWriter, dumps_row, last_row, truncate_metrics

__all__ = ["TMP_SUFFIX", "atomic_write_bytes", "atomic_write_json", "atomic_write_text", "disk_error", "strict_json",
           "write_config_yaml", "write_synced", "CHECKPOINTS", "CKPT_PREFIX", "checkpoint_dir", "checkpoints_to_keep",
           "list_checkpoints", "load_checkpoint", "optimizer_tensors", "prune_checkpoints", "restore",
           "save_checkpoint", "verify_metrics_prefix", "RUN_FILES", "claim_run_dir", "clean_temporaries",
           "clear_run_dir", "foreign_files", "is_minitrain_run", "is_run_dir", "refuse_foreign_files", "refuse_links",
           "remove_run_dir", "RunLock", "lock_run", "refuse_if_live", "MetricsWriter", "dumps_row", "last_row",
           "truncate_metrics"]
