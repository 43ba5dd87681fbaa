"""`minitrain export RUN --tensorboard DIR`, read back with the tensorboard package's own event reader."""
from __future__ import annotations

import json
import math

import pytest

pytest.importorskip("tensorboard")  # the optional extra (in .[test])

from minitrain.cli import main  # noqa: E402

from conftest import small_config  # noqa: E402

K = 60


@pytest.fixture(scope="module")
def lab_run(tmp_path_factory):
    """A small lab run: the x50 gradient scale (injection A) at K, then its diagnosis written beside it."""
    from minitrain import trainer

    out = tmp_path_factory.mktemp("experiments") / "19-injection-A"
    trainer.train(small_config("injection=scale", f"injection_step={K}"), out)
    assert main(["diagnose", str(out), "--write", "--spoil"]) == 0  # a lab run: its diagnosis is a spoiler
    (out.parent / "REVEALED.json").write_text('{"revealed_by": "test"}')  # export refuses a sealed lab run
    return out


def read_events(folder):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def test_export_holds_the_runs_scalars_per_tensor_stats_and_events(lab_run, tmp_path, capsys):
    assert main(["export", str(lab_run), "--tensorboard", str(tmp_path / "tb")]) == 0
    assert "tensorboard --logdir" in capsys.readouterr().out
    acc = read_events(tmp_path / "tb" / lab_run.name)
    rows = [json.loads(line) for line in (lab_run / "metrics.jsonl").read_text().splitlines()]
    tags = acc.Tags()["scalars"]
    for tag in ("loss/train", "loss/val", "lr", "grad_norm/pre_clip", "grad_norm/post_clip", "grad_norm/clipped",
                "logit_max", "activation/layer_0", "batch/rare_share", "loss/irregular",
                "tok_emb.weight/grad_norm_pre_clip", "tok_emb.weight/adam_v_mean", "lm_head.bias/update_to_weight",
                "blocks.0.attn.qkv.weight/spectral_norm"):
        assert tag in tags, tag
    loss = acc.Scalars("loss/train")
    assert [e.step for e in loss] == [r["step"] for r in rows]
    assert [e.value for e in loss] == pytest.approx([r["loss"] for r in rows], rel=1e-6)  # float32 in the file
    gn = {e.step: e.value for e in acc.Scalars("grad_norm/pre_clip")}
    assert gn[K] == pytest.approx(rows[K]["grad_norm"], rel=1e-6) and gn[K] > 20 * gn[K - 1]
    g = {e.step: e.value for e in acc.Scalars("blocks.1.mlp.fc.weight/grad_norm_pre_clip")}
    assert g[K] == pytest.approx(rows[K]["params"]["blocks.1.mlp.fc.weight"]["g"], rel=1e-6)
    val = acc.Scalars("loss/val")
    assert [e.step for e in val] == [r["step"] for r in rows if r["val_loss"] is not None]
    texts = {tag: [(e.step, e.tensor_proto.string_val[0].decode()) for e in acc.Tensors(tag)]
             for tag in acc.Tags()["tensors"]}
    assert texts["events/injection"][0][0] == K and "scale" in texts["events/injection"][0][1]
    assert [s for s, _ in texts["events/diagnosis"]] == [K] and "gradient_explosion" in texts["events/diagnosis"][0][1]
    assert any(step == K and "zclip" in text for step, text in texts["events/anomaly"])
    assert "19-injection-A" in texts["run/summary"][0][1]
    assert not any(math.isnan(e.value) for e in loss)


def test_export_refuses_to_overwrite_and_needs_a_run(lab_run, tmp_path, capsys):
    dest = tmp_path / "tb"
    assert main(["export", str(lab_run), "--tensorboard", str(dest)]) == 0
    capsys.readouterr()
    assert main(["export", str(lab_run), "--tensorboard", str(dest)]) == 2
    err = capsys.readouterr().err
    assert "--force" in err and len(err.strip().splitlines()) == 1
    assert main(["export", str(lab_run), "--tensorboard", str(dest), "--force"]) == 0
    assert len(list((dest / lab_run.name).glob("events.out.tfevents.*"))) == 1
    assert main(["export", str(tmp_path), "--tensorboard", str(dest)]) == 2
    assert "holds no metrics.jsonl" in capsys.readouterr().err
