"""Run one trainer of this suite in its own process: python train_one.py TRAINER CONFIG_JSON OUT_DIR.

The working directory is OUT_DIR, so SummaryWriter() and the HF Trainer write their default folders there.
"""
import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gru_tb  # noqa: E402
import hf_opt  # noqa: E402
import mixer_wandb  # noqa: E402

TRAINERS = {"gru": gru_tb.train, "opt": hf_opt.train, "mixer": mixer_wandb.train}

if __name__ == "__main__":
    torch.set_num_threads(1)
    trainer, config, out = sys.argv[1], json.loads(sys.argv[2]), Path(sys.argv[3]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    os.chdir(out)
    info = TRAINERS[trainer](out, config)
    (out / "trained.json").write_text(json.dumps(info))
