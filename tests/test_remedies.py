import json
import shutil

from conftest import small_config
from minitrain import loop
from minitrain.run import files


def test_a_zclip_run_resumes_byte_identically(tmp_path):
    """ZClip keeps an EMA of the gradient norm: it travels in the checkpoint, so a resume continues it."""
    cfg = small_config("remedy=zclip", "remedy_zclip_z=1.0", "remedy_zclip_warmup=5")
    whole = tmp_path / "whole"
    loop.train(cfg, whole)
    manifest = json.loads((whole / "manifest.json").read_text())
    assert manifest["remedy"]["action_count"] > 0  # the remedy acted after the resume point too
    cut = tmp_path / "cut"
    shutil.copytree(whole, cut)
    for step in files.list_checkpoints(cut):
        if step > 40:
            shutil.rmtree(files.checkpoint_dir(cut, step))
    manifest["status"] = "running"  # as if killed after the checkpoint at step 40
    (cut / "manifest.json").write_text(json.dumps(manifest))
    loop.resume(cut)
    assert (cut / "metrics.jsonl").read_bytes() == (whole / "metrics.jsonl").read_bytes()
    assert json.loads((cut / "manifest.json").read_text())["remedy"]["action_count"] == manifest["remedy"]["action_count"]
