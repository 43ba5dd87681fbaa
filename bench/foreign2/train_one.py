"""Run one foreign2 trainer in its own process: python train_one.py TRAINER CONFIG_JSON OUT_DIR.

The working directory is OUT_DIR, so a SummaryWriter() with no folder writes OUT_DIR/runs/ as it would for a
user. TRAINER is gptchar, hfllama or litcsv; each is imported only when asked for (transformers is slow to load).
"""
import importlib
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

if __name__ == "__main__":
    trainer, config, out = sys.argv[1], json.loads(sys.argv[2]), Path(sys.argv[3]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    os.chdir(out)
    info = importlib.import_module(trainer).train(out, config)
    (out / "trained.json").write_text(json.dumps(info))
