"""dashboard.html (experiments/index.html: test_index.py): content, escaping, damaged data, and a real headless browser.

One tiny lab is trained once for the module: a 60-step baseline (checkpoints every 10, all kept), three injection
runs at K=30 (scale, bad_batch, v_corrupt) and one blind run, forked from the baseline at K. The browser tests
drive Debian's chromium through Playwright with every network request aborted (they are skipped when chromium is
not installed): the panel registry's numbers and axis titles, legend toggle, smoothing slider, tooltip values,
shared zoom (drag, wheel, shift+drag pan), PNG/CSV export, the blind badge, the sealed stability check, a
compared run.
"""
from __future__ import annotations

import csv
import io
import json
import re
import shutil
from pathlib import Path

import pytest

from conftest import screenshot
from minitrain import trainer
from minitrain.analysis import compare, movers, panels
from minitrain.cli import main
from minitrain.core.config import build_config
from minitrain.core.errors import UserError
from minitrain.lab.runs import write_pages
from minitrain.views import dashboard

K = 30
HOSTILE = '</script><script>alert("x")</script><img src=x onerror=alert(1)> & <!--'


def tiny(**extra) -> "TrainConfig":  # noqa: F821
    sets = ["steps=60", "ckpt_every=10", "ckpt_keep_last=0", "eval_every=10", "spectral_every=10", "progress=false"]
    return build_config({}, sets + [f"{k}={v}" for k, v in extra.items()])


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Path:
    exp = tmp_path_factory.mktemp("dash") / "experiments"
    runs = {"18-baseline": tiny(), "19-injection-A": tiny(injection="scale", injection_step=K),
            "19-injection-B": tiny(injection="bad_batch", injection_step=K),
            "19-injection-C": tiny(injection="v_corrupt", injection_step=K),
            "19-blind/01": tiny(injection="bad_batch", injection_step=K, blind="true")}
    (exp / "19-blind").mkdir(parents=True)
    (exp / "19-blind" / "SEALED.json").write_text('{"lab": "spike"}')  # a blind lab, not revealed: sealed
    (exp / "REVEALED.json").write_text('{"revealed_by": "test"}')  # the spike lab's runs are open
    for name, cfg in runs.items():
        trainer.train(cfg, exp / name)
        dashboard.write_dashboard(exp / name)
    return exp


def embedded(page: str) -> dict:
    """The JSON data block of a dashboard page."""
    m = re.search(r'<script type="application/json" id="dashboard-data">(.*?)</script>', page, re.S)
    assert m, "no data block"
    return json.loads(m.group(1))


def data_of(lab: Path, name: str) -> dict:
    return embedded((lab / name / "dashboard.html").read_text())


def copy_run(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("checkpoints", "dashboard.html"))
    return dst


# ---------------------------------------------------------------------------------------------------
# Content (no browser)
# ---------------------------------------------------------------------------------------------------


def test_the_baseline_is_found_and_the_exact_difference_starts_at_k(lab):
    data = data_of(lab, "19-injection-B")
    assert [(r["name"], r["role"]) for r in data["runs"]] == [("19-injection-B", "run"), ("18-baseline", "baseline")]
    diff = data["diffs"][0]
    # forked from the baseline: identical rows before K, so the exact difference starts at K
    assert diff["first_difference"] == K and diff["loss"][:K] == [0.0] * K
    k_markers = [m for m in data["markers"] if m["kind"] == "k"]
    assert k_markers and k_markers[0]["step"] == K and "bad_batch" in k_markers[0]["label"]
    assert "She has written the letter." in k_markers[0]["label"]
    assert data_of(lab, "18-baseline")["diffs"] == [] and len(data_of(lab, "18-baseline")["runs"]) == 1


def test_difference_below_float_rounding_is_called_so(lab):
    a = data_of(lab, "19-injection-A")["diffs"][0]["rounding"]
    b = data_of(lab, "19-injection-B")["diffs"][0]["rounding"]
    # x50 on every gradient is cut back by clipping (pre-clip norm > 1 here): the loss moves by float rounding only
    assert a["loss"]["within"] and 0 < a["loss"]["max_abs"] <= a["loss"]["bound"]
    assert not a["grad_norm"]["within"]  # ... while the pre-clip norm at K is x50: a real difference
    assert not b["loss"]["within"] and b["loss"]["max_abs"] > 0.1  # the bad batch's own loss at K
    assert compare.FLOAT_ROUNDING_REL == 32 * 2.0 ** -23


def test_panels_and_tensor_statistics_come_from_the_registry(lab):
    data = data_of(lab, "19-injection-C")
    assert [p["number"] for p in data["panels"]] == list(range(1, len(panels.PANELS) + 1))
    course = ["Loss: train and validation", "Learning rate", "Gradient norm before clipping",
              "Mean absolute activation per layer", "Largest singular value of weight matrices",
              "Update-to-weight ratio per tensor", "Loss per class: regular vs irregular verbs"]
    assert [p["title"] for p in data["panels"][:7]] == course  # the course's panels 1-7, in its order
    stats = [s.split(".", 1)[1] for p in data["panels"] for s in p["signals"] if s.startswith("params.")]
    assert data["tensor_stats"] == stats and set(data["runs"][0]["per_tensor"]["stats"]) == set(stats)
    js = dashboard.page_script().split("\n", 1)[1]  # the page's own modules (after uPlot)
    for s in stats:  # the script gets the list through the data, never a hand copy
        assert f"'{s}'" not in js and f'"{s}"' not in js
    for p in panels.PANELS:  # ... and each panel's series from its registry entry, never by its key
        assert f"'{p.key}'" not in js and f'"{p.key}"' not in js, p.key
    assert "key ===" not in js and "key.indexOf" not in js
    assert panels.cite("grad") == "panel 3 'Gradient norm before clipping'"


def test_stability_check_cites_the_registry(lab):
    from minitrain.analysis import stability

    text = stability.render_markdown()
    cited = set(re.findall(r"panel (\d+) '([^']+)'", text))
    assert cited and cited <= {(str(p.number), p.title) for p in panels.PANELS}, cited
    for number in ("3", "15", "16"):  # §6.1's factor f and §7.1's per-tensor ratio have panels of their own
        assert number in {n for n, _ in cited}


def test_movers_find_the_corrupted_second_moment(lab):
    data = data_of(lab, "19-injection-C")
    top = data["movers"]["vm"][0]
    assert top["name"] == "lm_head.bias" and top["step"] == K and top["factor"] > 30, data["movers"]["vm"]
    assert top["rose"] is True
    # its update fell (v up, so g/sqrt(v) down): a fall, never labelled as "x.. its median"
    fell = next(m for m in data["movers"]["ur"] if m["name"] == "lm_head.bias")
    assert fell["rose"] is False and fell["factor"] > 10
    assert len(data["movers"]["ur"]) <= movers.MOVERS


def test_movers_of_a_run_without_k_are_ranked_after_their_lookback(lab):
    data = data_of(lab, "19-blind/01")  # K withheld: ranked over the steps that have 50 steps of past
    lo = int(re.search(r"over steps (\d+)-", data["movers_rule"]).group(1))
    assert lo >= movers.MOVER_LOOKBACK or lo == 1
    assert all(m["step"] >= lo for ms in data["movers"].values() for m in ms)


def test_health_summary_agrees_with_the_tree(lab):
    base = data_of(lab, "18-baseline")
    health = {h["label"]: h for h in base["health"]}
    assert health["step-0 loss"]["verdict"] == "ok" and "ln 512" in health["step-0 loss"]["value"]
    assert health["clip rate"]["value"].startswith("60 of 60 steps")  # clipping engages on every step here ...
    assert health["clip rate"]["verdict"] == "info"  # ... which the tree calls healthy
    # nothing the tree calls healthy is flagged: the clean baseline's only mark is that 60 steps do not reach
    # the n-gram baseline (the full 2000-step seed-42 baseline has none at all: docs/benchmarks.md)
    assert base["checks"]["verdict"]["cause"] == "healthy"
    assert [h["label"] for h in base["health"] if h["verdict"] in ("warn", "bad")] == ["final val loss"]
    assert health["stability check"]["verdict"] == "ok"
    b = {h["label"]: h for h in data_of(lab, "19-injection-B")["health"]}
    assert b["stability check"]["verdict"] == "bad" and "§4.A" in b["stability check"]["value"]


@pytest.mark.parametrize("grad_clip, value, detail", [
    (6.0, "0 of 60 steps (0.0%) at 6", "against grad_clip 6"),  # the pretraining-like preset's threshold
    (0.0, "clipping off (grad_clip=0)", "every step's full gradient"),
])
def test_the_clip_rate_reads_the_runs_own_config(lab, tmp_path, grad_clip, value, detail):
    run = copy_run(lab / "18-baseline", tmp_path / "run")
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["config"]["grad_clip"] = grad_clip
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for r in rows:  # as such a run logs it: no step reaches the threshold
        r["clipped"] = False
    (run / "manifest.json").write_text(json.dumps(manifest))
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    clip = {h["label"]: h for h in dashboard.build_payload(run)["health"]}["clip rate"]
    assert clip["value"] == value
    assert detail in clip["detail"] and "1.0" not in clip["detail"]


def test_the_page_gets_ln_v_from_the_walker(lab):
    data = data_of(lab, "18-baseline")
    assert data["config"]["vocab_size"] == 512  # the tokenizer's, as the walker's §1.3 reads it (assets draw ln V from it)


def test_every_question_of_the_tree_is_measured_on_the_page(lab):
    from minitrain.analysis import stability

    data = data_of(lab, "19-injection-C")
    ids = [q["id"] for q in data["checks"]["questions"]]
    assert ids == [i for i, it in stability.ITEMS.items() if isinstance(it, stability.Node)]
    assert all(q["measured"] and q["threshold"] for q in data["checks"]["questions"])
    sig = data["checks"]["signals"]
    assert len(sig["v_factor"]) == len(sig["steps"]) and max(x for x in sig["v_factor"] if x) > 30  # v x100 at K
    assert sig["v_factor_band"][1] == pytest.approx(1.02, rel=1e-3) or sig["v_factor_band"][1] > 1.02


def test_a_blind_page_withholds_and_seals(lab):
    page = (lab / "19-blind" / "01" / "dashboard.html").read_text()
    data = embedded(page)
    assert data["blind"] and data["sealed"] and data["diagnosis"] is None
    assert data["injection"]["withheld"] and data["injection"]["step"] is None
    assert "She has written" not in page and "injection" not in data["manifest"]["config"]
    assert set(data["checks"]) == {"signals"} and "§4.A" not in page  # the verdict and answers after the reveal
    assert [m for m in data["markers"] if m["kind"] == "k"] == []
    assert {h["label"]: h for h in data["health"]}["stability check"]["value"] == "sealed"


def sealed_pages(lab: Path, tmp_path: Path) -> dict[str, Path]:
    """A sealed page of each lab: spike (C, sealed by hand), blind, and break-it (a copy of the blind run in a
    break-it lab's folder)."""
    spike = dashboard.write_dashboard(lab / "19-injection-C", out=tmp_path / "C.html", sealed=True)
    broke = tmp_path / "19-break-it"
    copy_run(lab / "19-blind" / "01", broke / "01")
    (broke / "SEALED.json").write_text('{"lab": "break-it"}')
    return {"spike": spike, "blind": lab / "19-blind" / "01" / "dashboard.html",
            "break-it": dashboard.write_dashboard(broke / "01")}


def test_a_sealed_page_shows_every_panel_the_check_cites_and_names_no_answer(lab, tmp_path):
    from minitrain.analysis import stability
    leaves = [it for s in stability.TREE for it in s.items if not isinstance(it, stability.Node)]
    status_words = {"unknown", "non_finite", "healthy"}  # also a run's status (a badge's class): not the tree's
    for lab_name, path in sealed_pages(lab, tmp_path).items():
        page = path.read_text()
        data = embedded(page)
        assert data["sealed"], lab_name
        assert set(data["checks"]) == {"signals"}, lab_name  # measurements, no verdict, no question's answer
        assert any(x for x in data["checks"]["signals"]["v_factor"]), lab_name  # panel 15 has data
        assert any(x for x in data["checks"]["signals"]["g_all_up"] if x), lab_name  # panel 16 has data
        for leaf in leaves:  # nowhere in the page, its source included
            assert leaf.id not in page, (lab_name, leaf.id)
            assert leaf.cause in status_words or leaf.cause not in page, (lab_name, leaf.cause)
        assert "may not hold" in {h["label"]: h for h in data["health"]}["stability check"]["detail"]


def test_embed_json_leaves_nothing_that_closes_a_script():
    text = dashboard.embed_json({"s": HOSTILE, "u": "\u2028ñ"})
    assert not set("<>&") & set(text) and "\u2028" not in text
    assert json.loads(text) == {"s": HOSTILE, "u": "\u2028ñ"}


def test_uplot_is_inlined_unmodified_and_pinned(lab):
    import hashlib

    vendor = Path(dashboard.__file__).parent / "assets" / "vendor"
    pins = json.loads((vendor / "uplot.json").read_text())
    for name, digest in pins["files"].items():
        assert hashlib.sha256((vendor / name).read_bytes()).hexdigest() == digest, name
    page = (lab / "18-baseline" / "dashboard.html").read_text()
    assert (vendor / "uPlot.iife.min.js").read_text() in page and (vendor / "uPlot.min.css").read_text() in page
    assert "MIT" in (vendor / "uPlot.LICENSE").read_text()
    assert "default-src 'none'" in page  # one offline file: the page may fetch nothing


def test_hostile_strings_stay_text(lab, tmp_path):
    run = copy_run(lab / "19-injection-B", tmp_path / "run <script>alert(1) &amp; <b>x")
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["name"] = HOSTILE
    manifest["injection"]["record"]["sentence"] = HOSTILE
    manifest["config"]["injection_sentence"] = HOSTILE
    (run / "manifest.json").write_text(json.dumps(manifest))
    (run / "diagnosis.json").write_text(json.dumps({"leaf": HOSTILE, "cause": "bad batch", "anomaly_step": K,
                                                    "diagnosis": HOSTILE, "remediation": "skip it",
                                                    "path": ["§1", HOSTILE]}))
    page = dashboard.write_dashboard(run).read_text()
    assert page.lower().count("<script") == 2  # the data block and the drawing script, nothing injected
    title = page.split("<title>", 1)[1].split("</title>", 1)[0]
    assert "<" not in title and "&lt;script&gt;" in title  # the folder name, HTML-escaped
    assert "<img" not in page and "<!--" not in page
    data = embedded(page)
    assert data["manifest"]["name"] == HOSTILE and data["diagnosis"]["leaf"] == HOSTILE
    assert HOSTILE in next(m["label"] for m in data["markers"] if m["kind"] == "k")
    assert any(m["kind"] == "diagnosis" and m["step"] == K for m in data["markers"])
    sealed = embedded(dashboard.write_dashboard(run, sealed=True).read_text())
    assert sealed["diagnosis"] is None and not any(m["kind"] == "diagnosis" for m in sealed["markers"])


def truncated_copy(lab: Path, dst: Path) -> Path:
    run = copy_run(lab / "18-baseline", dst)
    raw = (run / "metrics.jsonl").read_bytes()
    lines = raw.split(b"\n")
    (run / "metrics.jsonl").write_bytes(b"\n".join(lines[:45]) + b"\n" + lines[45][: len(lines[45]) // 2])
    (run / "results.json").unlink()
    return run


def test_truncated_metrics_render_with_a_note(lab, tmp_path):
    run = truncated_copy(lab, tmp_path / "killed")
    data = embedded(dashboard.write_dashboard(run).read_text())
    assert "metrics end at step 44" in data["data_note"]
    assert data["runs"][0]["steps"][-1] == 44
    assert any(m["kind"] == "end" and m["step"] == 44 for m in data["markers"])


def nonfinite_copy(lab: Path, dst: Path) -> Path:
    """A run that stopped on NaN at step 40, as the loop leaves it (null loss and grad norm in the last row)."""
    run = copy_run(lab / "18-baseline", dst)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()][:41]
    rows[40].update(loss=None, grad_norm=None, grad_norm_clipped=None, clipped=False, nonfinite=12, logit_max=None)
    rows[40]["act"] = [None, None]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = json.loads((run / "results.json").read_text())
    res.update(status="non_finite", stopped_at_step=40, final_val_loss=None, steps_done=41)
    (run / "results.json").write_text(json.dumps(res))
    return run


def test_nonfinite_run_renders(lab, tmp_path):
    run = nonfinite_copy(lab, tmp_path / "nan")
    data = embedded(dashboard.write_dashboard(run).read_text())
    assert data["status"] == "non_finite"
    assert data["runs"][0]["series"]["loss"][40] is None
    health = {h["label"]: h for h in data["health"]}
    assert health["non-finite values"]["verdict"] == "bad" and "step 40" in health["non-finite values"]["value"]
    assert any(m["kind"] == "nonfinite" and m["step"] == 40 for m in data["markers"])


def test_whether_the_baseline_shares_the_trunk_is_analysis_s_answer():
    """compare.baseline_notes (reader.same_trunk): nothing for a shared trunk, the remedy for a remediated run,
    the settings that differ otherwise; the page shows its notes as they are."""
    base = {"trunk_hash": "t1", "config": {"lr_max": 3e-4, "seed": 1, "injection": "none"}}
    fault = {"trunk_hash": "t1", "config": {**base["config"], "injection": "scale"}}
    remedied = {"trunk_hash": "t2", "config": {**fault["config"], "remedy_zclip": True}}
    other = {"trunk_hash": "t3", "config": {**fault["config"], "lr_max": 3e-3}}
    assert compare.baseline_notes(fault, base, "18-baseline") == []
    assert compare.baseline_notes(remedied, base, "18-baseline") == [
        "this run applies a remedy the baseline does not (remedy_zclip=True)"]
    assert compare.baseline_notes(other, base, "18-baseline") == [
        "baseline 18-baseline has another config beyond the injection (lr_max): differences are not the "
        "injection's alone"]


def one_value_non_finite(row: dict, where: str) -> None:
    if where == "logits":
        row["logit_max"] = None
    else:  # one tensor's statistic
        name = next(iter(row["params"]))
        row["params"][name]["vm"] = None


@pytest.mark.parametrize("where", ["logits", "one tensor"])
def test_the_marker_and_the_walker_name_the_same_non_finite_step(lab, tmp_path, where):
    """Only the logits, or only one tensor's Adam v, non-finite at step 37 (loss and grad norm finite): the page's
    marker, the walker's §3.1 and the lab report's measure all name step 37 (run/nonfinite.py, one rule)."""
    run = copy_run(lab / "18-baseline", tmp_path / "nan")
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    at = next(i for i, r in enumerate(rows) if r["step"] >= 37 and r.get("params"))
    one_value_non_finite(rows[at], where)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = embedded(dashboard.write_dashboard(run).read_text())
    step = rows[at]["step"]
    assert [m["step"] for m in data["markers"] if m["kind"] == "nonfinite"] == [step]
    section = next(q for q in data["checks"]["questions"] if q["id"] == "§3.1")
    assert section["answer"] == "yes" and section["step"] == step
    assert compare.measure(run, None, None)["non_finite_step"] == step


def test_cli_dashboard_and_index(lab, tmp_path, capsys):
    out = tmp_path / "page.html"
    assert main(["dashboard", str(lab / "19-injection-B"), "--no-baseline", "--out", str(out)]) == 0
    assert embedded(out.read_text())["diffs"] == []
    assert main(["dashboard", str(lab / "19-injection-C"), "--baseline", str(lab / "19-injection-B"),
                 "--out", str(out)]) == 0
    assert embedded(out.read_text())["runs"][1]["name"] == "19-injection-B"
    capsys.readouterr()
    assert main(["dashboard", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not a folder" in err
    assert main(["index", str(lab)]) == 0 and (lab / "index.html").exists()


def test_compare_runs_are_drawn_beside_the_baseline(lab, tmp_path, capsys):
    hostile = copy_run(lab / "19-injection-B", tmp_path / "B <script>alert(3)</script>")
    out = tmp_path / "three-way.html"
    page = dashboard.write_dashboard(lab / "19-injection-C", baseline=lab / "18-baseline", out=out,
                                     compare=[hostile]).read_text()
    assert page.lower().count("<script") == 2  # the compared run's name stays data
    data = embedded(page)
    assert [(r["name"], r["role"]) for r in data["runs"]][1:] == [("18-baseline", "baseline"), (hostile.name, "compare")]
    # its own exact difference to the baseline, the same numbers as on its own page
    own = data_of(lab, "19-injection-B")["diffs"][0]
    assert data["diffs"][1] == {**own, "name": hostile.name} and own["first_difference"] == K
    with pytest.raises(UserError, match="already on the page"):
        dashboard.write_dashboard(lab / "19-injection-C", baseline=lab / "18-baseline", out=out,
                                  compare=[lab / "18-baseline"])
    assert main(["dashboard", str(lab / "19-injection-C"), "--compare", str(lab / "19-injection-B"),
                 "--out", str(out)]) == 0
    assert "compared: 19-injection-B" in capsys.readouterr().out
    assert [r["name"] for r in embedded(out.read_text())["runs"] if r["role"] == "compare"] == ["19-injection-B"]
    assert main(["dashboard", str(lab / "19-injection-C"), "--compare", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--compare" in err


def test_a_failing_dashboard_never_loses_the_run(tmp_path, monkeypatch, capsys):
    def full_disk(*a, **k):
        raise OSError(28, "No space left on device")

    def bug(*a, **k):
        raise RuntimeError("boom")

    (tmp_path / "metrics.jsonl").write_text("")
    monkeypatch.setattr(dashboard, "write_dashboard", full_disk)
    write_pages(tmp_path)  # must not raise
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "warning: dashboard.html not written" in err and "No space left" in err
    monkeypatch.setattr(dashboard, "write_dashboard", bug)
    with pytest.raises(RuntimeError, match="boom"):  # a bug is not turned into a warning
        write_pages(tmp_path)


# ---------------------------------------------------------------------------------------------------
# A real browser, network blocked
# ---------------------------------------------------------------------------------------------------


class Opened:
    """A page opened from file:// with every other request aborted and recorded, errors collected, every
    panel drawn (the page draws panels below the first screen as they come near it)."""

    def __init__(self, browser, path: Path, width: int = 1400):
        self.context = browser.new_context(viewport={"width": width, "height": 900}, accept_downloads=True)
        self.page = self.context.new_page()
        self.network, self.errors, self.dialogs = [], [], []
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        self.page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(("file:", "blob:"))
                        else (self.network.append(route.request.url), route.abort()))
        self.page.goto(path.resolve().as_uri())
        self.page.wait_for_function("() => window.__dashboardReady === true", timeout=30_000)
        self.page.evaluate("() => window.__dashboard.drawAll()")

    def plot(self, key: str) -> dict:
        """The panel's uPlot state: series labels and shown flags, data columns, x range, axis titles."""
        return self.page.evaluate("""key => { const p = window.__dashboard.plots.find(q => q.spec.key === key);
            return { labels: p.u.series.map(s => s.label), show: p.u.series.map(s => s.show), data: p.u.data,
                     x: [p.u.scales.x.min, p.u.scales.x.max], y: [p.u.scales.y.min, p.u.scales.y.max],
                     axes: p.u.axes.map(a => a.label) }; }""", key)

    def hover(self, key: str, step: float | None = None, frac: float = 0.5):
        """Move the mouse over a panel's plot area, at `step` or at `frac` of its width."""
        over = self.page.locator(f"#panel-{key} .u-over")
        over.scroll_into_view_if_needed()
        box = over.bounding_box()
        if step is not None:
            x = self.page.evaluate("""([key, step]) => window.__dashboard.plots.find(q => q.spec.key === key)
                                      .u.valToPos(step, 'x')""", [key, step])
        else:
            x = box["width"] * frac
        self.page.mouse.move(box["x"] + min(max(x, 1), box["width"] - 1), box["y"] + box["height"] * 0.5)
        return box

    def check_clean(self):
        assert self.network == [], f"network requests were made: {self.network}"
        assert self.errors == [], f"console errors: {self.errors}"
        assert self.dialogs == []
        self.context.close()


def test_browser_renders_the_registry_offline(lab, browser):
    view = Opened(browser, lab / "19-injection-B" / "dashboard.html")
    page = view.page
    titles = page.locator(".panel h2").all_text_contents()
    drawn = [p for p in panels.PANELS if p.needs != "measured"]  # the lab's runs carry no natural_signals
    assert titles == [f"{p.number}. {p.title}" for p in drawn], titles
    for p in drawn:  # axis titles with units on every panel
        x, y = view.plot(p.key)["axes"]
        assert x == "step" and y.startswith(p.unit), (p.key, x, y)
    assert "nats" in view.plot("loss")["axes"][1]
    for p in drawn:  # every y-axis title fits beside its plot: its text (drawn on the canvas) is no longer than
        # the canvas is tall, so none is clipped
        size = page.evaluate("""key => { const u = window.__dashboard.plots.find(q => q.spec.key === key).u;
            const a = u.axes[1], c = document.createElement('canvas').getContext('2d');
            c.font = Array.isArray(a.labelFont) ? a.labelFont[0] : a.labelFont;
            return [c.measureText(a.label).width, u.root.querySelector('canvas').getBoundingClientRect().height]; }""",
                             p.key)
        assert 0 < size[0] <= size[1], (p.key, size)
    assert "step-0 loss" in page.locator("#health").inner_text()
    # the page's modules are inlined in one closure: no globals (window.panels is the #panels element)
    modules = page.evaluate("() => [typeof window.helpers, typeof window.chart, typeof window.panels.create]")
    assert modules == ["undefined"] * 3
    box = view.hover("grad", step=K)  # the K marker's label is in the tooltip at K
    assert "K=30: bad_batch" in page.locator("#panel-grad .tooltip").inner_text()
    screenshot(page, "dashboard.png")
    assert box["width"] > 600
    view.check_clean()


def test_legend_click_hides_and_shows_a_series(lab, browser):
    view = Opened(browser, lab / "19-injection-C" / "dashboard.html")
    i = view.plot("loss")["labels"].index("validation")
    canvas = view.page.locator("#panel-loss canvas").screenshot()
    entry = view.page.locator("#panel-loss .u-legend .u-series", has_text=re.compile(r"^validation$"))
    entry.click()
    after = view.plot("loss")
    assert after["show"][i] is False and all(s for j, s in enumerate(after["show"]) if j != i)
    assert view.page.locator("#panel-loss .u-legend .u-series.u-off").count() == 1
    assert view.page.locator("#panel-loss canvas").screenshot() != canvas  # the points are gone from the plot
    entry.click()
    assert view.plot("loss")["show"][i] is True
    ur = [label for label in view.plot("ur")["labels"] if str(label).startswith("lm_head.bias")]
    assert ur and "(1/" in ur[0] and " of its " in ur[0], ur  # its update fell: said as a fall
    view.check_clean()


def test_smoothing_slider_changes_the_drawn_line(lab, browser):
    view = Opened(browser, lab / "19-injection-C" / "dashboard.html")
    raw = data_of(lab, "19-injection-C")["runs"][0]["series"]["loss"]
    p = view.plot("loss")
    smoothed = p["data"][p["labels"].index("train loss (smoothed 0.90)")]
    assert smoothed[0] == pytest.approx(raw[0]) and smoothed != pytest.approx(raw)
    view.page.locator("#smoothing").fill("0.5")
    p = view.plot("loss")
    half = p["data"][p["labels"].index("train loss (smoothed 0.50)")]
    m, n, want = 0.0, 0, []  # the debiased EMA, as TensorBoard computes it
    for v in raw:
        n += 1
        m = 0.5 * m + 0.5 * v
        want.append(m / (1 - 0.5 ** n))
    assert half == pytest.approx(want, rel=1e-9) and half != smoothed
    view.page.locator("#smoothing").fill("0")
    p = view.plot("loss")
    assert not any("smoothed" in label for label in p["labels"])
    assert p["data"][p["labels"].index("train loss")] == pytest.approx(raw)
    view.check_clean()


def test_tooltip_shows_the_values_at_the_cursor_sorted(lab, browser):
    view = Opened(browser, lab / "19-injection-C" / "dashboard.html")
    view.hover("grad", frac=0.5)
    tip = view.page.locator("#panel-grad .tooltip")
    assert tip.is_visible()
    step = int(re.match(r"step (\d+)", tip.locator(".tstep").inner_text()).group(1))
    runs = {r["name"]: r for r in data_of(lab, "19-injection-C")["runs"]}
    i = runs["19-injection-C"]["steps"].index(step)
    rows = [r.strip() for r in tip.locator(".trow").all_inner_texts()]
    shown = {r.split(" ", 1)[1].strip(): float(r.split(" ", 1)[0]) for r in rows}
    assert shown["before clipping"] == pytest.approx(runs["19-injection-C"]["series"]["grad_norm"][i], rel=1e-5)
    assert shown["after clipping"] == pytest.approx(runs["19-injection-C"]["series"]["grad_norm_clipped"][i], rel=1e-5)
    assert shown["18-baseline: before clipping"] == pytest.approx(runs["18-baseline"]["series"]["grad_norm"][i], rel=1e-5)
    values = [float(r.split(" ", 1)[0]) for r in rows]
    assert values == sorted(values, reverse=True)  # largest first
    # the crosshair is shared: every panel's tooltip is at the same step
    assert view.page.locator("#panel-lr .tooltip .tstep").inner_text() == f"step {step}"
    view.check_clean()


def test_drag_wheel_and_pan_zoom_every_panel_together(lab, browser):
    view = Opened(browser, lab / "19-injection-C" / "dashboard.html")
    page = view.page
    box = view.hover("loss", frac=0.3)
    y = box["y"] + box["height"] / 2
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.7, y, steps=5)
    page.mouse.up()
    ranges = {tuple(view.plot(p.key)["x"]) for p in panels.PANELS if p.needs != "measured"}
    assert len(ranges) == 1, ranges  # every panel shows the same steps
    x0, x1 = ranges.pop()
    assert 0 < x0 < x1 < 59
    page.locator("#reset-zoom").click()
    view.hover("loss", frac=0.5)
    page.mouse.wheel(0, -300)
    w0, w1 = view.plot("lr")["x"]
    assert 0 < w0 < w1 < 59
    page.keyboard.down("Shift")
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.3, y, steps=4)
    page.mouse.up()
    page.keyboard.up("Shift")
    p0, p1 = view.plot("vm")["x"]
    assert p0 > w0 and p1 - p0 == pytest.approx(w1 - w0)  # panned to later steps, same width, on another panel
    page.locator("#reset-zoom").click()
    assert view.plot("grad")["x"] == [0, 59]
    view.check_clean()


def test_export_png_and_csv(lab, browser, tmp_path):
    view = Opened(browser, lab / "19-injection-C" / "dashboard.html")
    with view.page.expect_download() as dl:
        view.page.locator("#panel-grad .export-png").click()
    png = tmp_path / dl.value.suggested_filename
    dl.value.save_as(png)
    assert png.name == "19-injection-C-panel3-grad.png" and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with view.page.expect_download() as dl:
        view.page.locator("#panel-grad .export-csv").click()
    path = tmp_path / dl.value.suggested_filename
    dl.value.save_as(path)
    rows = list(csv.reader(io.StringIO(path.read_text())))
    assert rows[0][0] == "step" and "before clipping" in rows[0] and len(rows) == 61
    col = rows[0].index("before clipping")
    assert [float(r[col]) for r in rows[1:]] == data_of(lab, "19-injection-C")["runs"][0]["series"]["grad_norm"]
    view.check_clean()


def test_blind_badge_and_sealed_stability_check(lab, browser):
    view = Opened(browser, lab / "19-blind" / "01" / "dashboard.html")
    page = view.page
    assert "withheld" in page.locator("#injection-badge").inner_text()
    assert "no injection" not in page.locator("header").inner_text()
    assert "sealed" in page.locator("#health").inner_text()
    assert page.locator("#stability").count() == 0 and page.locator("#reveal-stability").count() == 0  # not in it
    view.check_clean()
    clean = Opened(browser, lab / "18-baseline" / "dashboard.html")
    assert clean.page.locator("#injection-badge").inner_text() == "no injection"
    assert clean.page.locator("#stability table").is_visible()  # not sealed: shown at once
    clean.check_clean()


def test_sealed_pages_draw_the_panels_the_check_cites(lab, browser, tmp_path):
    for lab_name, path in sealed_pages(lab, tmp_path).items():
        view = Opened(browser, path)
        titles = view.page.locator(".panel h2").all_text_contents()
        for key in ("v-factor", "g-all"):  # stability-check.md §6.1-6.3 and §7.1-7.2 ask the learner to read them
            p = panels.BY_KEY[key]
            assert f"{p.number}. {p.title}" in titles, (lab_name, titles)
            drawn = view.plot(key)["data"]
            assert any(v is not None for col in drawn[1:] for v in col), (lab_name, key)
        assert view.page.locator("#stability").count() == 0, lab_name  # no question's answer, no verdict
        view.check_clean()


def test_difference_panel_does_not_magnify_float_rounding(lab, browser):
    view = Opened(browser, lab / "19-injection-A" / "dashboard.html")
    assert "identical up to float rounding" in view.page.locator("#panel-diff-loss .sub").inner_text()
    assert "identical up to float rounding" not in view.page.locator("#panel-diff-grad .sub").inner_text()
    bound = data_of(lab, "19-injection-A")["diffs"][0]["rounding"]["loss"]["bound"]
    lo, hi = view.plot("diff-loss")["y"]
    assert hi >= bound and lo <= -bound  # the axis spans the rounding bound: the noise stays small on it
    view.check_clean()


def test_damaged_and_hostile_runs_render(lab, browser, tmp_path):
    killed = truncated_copy(lab, tmp_path / "killed")
    view = Opened(browser, dashboard.write_dashboard(killed))
    assert "metrics end at step 44" in view.page.locator("#data-note").inner_text()
    view.check_clean()
    nan = nonfinite_copy(lab, tmp_path / "nan")
    view = Opened(browser, dashboard.write_dashboard(nan))
    view.hover("loss", step=40)
    assert "non-finite at step 40" in view.page.locator("#panel-loss .tooltip").inner_text()
    view.check_clean()
    run = copy_run(lab / "19-injection-B", tmp_path / "x <script>alert(2) <i>")
    (run / "diagnosis.json").write_text(json.dumps({"leaf": HOSTILE, "anomaly_step": K}))
    view = Opened(browser, dashboard.write_dashboard(run))
    assert view.page.locator("h1").inner_text() == run.name  # shown as text, not parsed
    assert HOSTILE in view.page.locator("#diagnosis").inner_text()
    assert view.page.locator("img").count() == 0 and view.page.locator("script").count() == 2
    view.check_clean()


def test_a_compared_run_is_drawn_and_can_be_hidden(lab, browser, tmp_path):
    out = dashboard.write_dashboard(lab / "19-injection-C", baseline=lab / "18-baseline", out=tmp_path / "cmp.html",
                                    compare=[lab / "19-injection-B"])
    view = Opened(browser, out)
    page = view.page
    for key, label in (("loss", "19-injection-B: train loss (smoothed 0.90)"), ("grad", "19-injection-B: before clipping"),
                       ("lr", "19-injection-B: learning rate"), ("act", "19-injection-B: layer 0"),
                       ("diff-loss", "19-injection-B: train loss difference")):
        assert label in view.plot(key)["labels"], key  # every overlaid panel, not only the top ones
    view.hover("grad", frac=0.7)
    assert "19-injection-B" in page.locator("#panel-grad .tooltip").inner_text()
    page.locator("#runs input[data-run='19-injection-B']").uncheck()  # choose the runs inside the page
    assert not any("19-injection-B" in label for label in view.plot("grad")["labels"])
    assert not any("19-injection-B" in label for label in view.plot("diff-loss")["labels"])
    page.locator("#add-run").set_input_files(str(lab / "19-injection-A" / "dashboard.html"))  # and add another
    page.wait_for_function("() => window.__dashboard.state.extra.length === 1")
    assert "19-injection-A: before clipping" in view.plot("grad")["labels"]
    view.check_clean()


# ---------------------------------------------------------------------------------------------------
# The cursor and the health line, with real mouse events
# ---------------------------------------------------------------------------------------------------


TIP_OUTSIDE_PANEL = """() => window.__dashboard.plots.filter(p => p.u).map(p => {
    const t = p.u.over.querySelector('.tooltip');
    if (!t || t.style.display === 'none') return null;
    const a = t.getBoundingClientRect(), b = p.root.getBoundingClientRect();
    return a.left >= b.left && a.right <= b.right && a.top >= b.top && a.bottom <= b.bottom ? null
        : [p.spec.key, [a.left, a.top, a.right, a.bottom], [b.left, b.top, b.right, b.bottom]];
}).filter(x => x)"""


def test_every_tooltip_stays_inside_its_panel(lab, browser, tmp_path):
    """Tall tooltips (every tensor picked, compared runs) near every edge: each box stays in its own panel."""
    out = dashboard.write_dashboard(lab / "19-injection-C", baseline=lab / "18-baseline", out=tmp_path / "cmp.html",
                                    compare=[lab / "19-injection-A", lab / "19-injection-B"])
    view = Opened(browser, out)
    page = view.page
    page.set_viewport_size({"width": 1000, "height": 700})
    for select in page.locator(".panel .ctl select").all():
        select.select_option("*")  # every tensor: the tallest tooltips
    tallest = 0
    for key in ("ur", "act", "g-all"):  # a per-tensor panel, a left and a right one further down
        for frac in (0.02, 0.5, 0.98):
            view.hover(key, frac=frac)
            tip = page.locator(f"#panel-{key} .tooltip")
            assert tip.is_visible()
            tallest = max(tallest, tip.bounding_box()["height"])
            assert page.evaluate(TIP_OUTSIDE_PANEL) == [], (key, frac)
    assert tallest > 150  # tall ones were tried
    # every line is in the tooltip (in columns), or counted in its last line when even the columns do not fit
    tip = page.locator("#panel-ur .tooltip")
    more = tip.locator(".tmore")
    hidden = int(re.match(r"\+ (\d+) more", more.inner_text()).group(1)) if more.count() else 0
    shown = sum(view.plot("ur")["show"][1:])
    assert tip.locator(".trow").count() + hidden == shown and shown >= 12
    view.check_clean()


def long_copy(lab: Path, dst: Path, steps: int = 1000, spike: int = 500) -> Path:
    """The baseline stretched to `steps` steps (its rows 10..59 repeated, renumbered) with one loss spike:
    more steps than the plot has pixels, so a pixel column holds several steps."""
    run = copy_run(lab / "18-baseline", dst)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    out = []
    for s in range(steps):
        r = json.loads(json.dumps(rows[10 + s % 50]))
        r["step"] = s
        out.append(r)
    out[spike]["grad_norm"] = 10 * max(r["grad_norm"] for r in rows)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in out))
    return run


def test_the_cursor_never_skips_a_spike_inside_its_pixel_column(lab, browser, tmp_path):
    run = long_copy(lab, tmp_path / "long")
    spike = json.loads((run / "metrics.jsonl").read_text().splitlines()[500])["grad_norm"]
    view = Opened(browser, dashboard.write_dashboard(run), width=700)  # ~570 px of plot for 1000 steps
    page = view.page
    per_px = page.evaluate("""() => { const u = window.__dashboard.plots.find(p => p.spec.key === 'grad').u;
                                      return u.posToVal(1, 'x') - u.posToVal(0, 'x'); }""")
    assert per_px > 1.5  # full zoom: more than one step per pixel column
    tip = page.locator("#panel-grad .tooltip")
    for offset in (-0.4, 0, 0.4):  # wherever the mouse lands on the spike's pixel, whichever step is nearest it
        view.hover("grad", step=500 + offset * per_px)
        assert tip.locator(".tstep").inner_text() == "step 500"
        rows = dict((r.split(" ", 1)[1].strip(), float(r.split(" ", 1)[0])) for r in tip.locator(".trow").all_inner_texts())
        assert rows["before clipping"] == pytest.approx(spike, rel=1e-5)
        # the crosshair's dot is on the spike too
        assert page.evaluate("() => window.__dashboard.plots.find(p => p.spec.key === 'grad').u.cursor.idxs[1]") == 500
    # another panel, flat there, reads a step inside its own column
    lr_step = int(page.locator("#panel-lr .tooltip .tstep").inner_text().split()[1])
    assert abs(lr_step - 500) <= 2 * per_px
    page.evaluate("() => window.__dashboard.zoomTo(480, 520)")  # zoomed in: the step under the cursor
    view.hover("grad", step=510)
    assert tip.locator(".tstep").inner_text() == "step 510"
    view.check_clean()


NO_CUT_TEXT = """() => Array.from(document.querySelectorAll('#health *, header.top *')).filter(e => {
    const st = getComputedStyle(e);
    return st.textOverflow === 'ellipsis' || ((st.overflowX === 'hidden' || st.overflowX === 'clip') && e.scrollWidth > e.clientWidth + 1);
}).map(e => e.className + ': ' + e.textContent)"""


def test_the_health_line_is_never_cut(lab, browser):
    for name in ("19-injection-B", "19-blind/01"):
        view = Opened(browser, lab / name / "dashboard.html", width=760)  # narrow: the longest lines wrap
        assert view.page.evaluate(NO_CUT_TEXT) == [], name
        health = view.page.locator("#health").inner_text()
        for item in data_of(lab, name)["health"]:  # every word of every item is on the screen
            assert item["value"] in health and (item.get("detail") or "") in health
        view.check_clean()
    blind = data_of(lab, "19-blind/01")["health"]
    lr = next(h for h in blind if h["label"] == "learning rate")
    assert "?" not in lr["value"] and "warmup withheld (blind run: panel 2 'Learning rate'" in lr["value"]
    assert "warmup 100 steps" in next(h for h in data_of(lab, "18-baseline")["health"] if h["label"] == "learning rate")["value"]


def test_a_perplexity_past_a_float_says_overflow():
    from minitrain.analysis import health

    assert health.perplexity_text(3.18) == "24.05" and health.perplexity_text(750.0) == "overflow"


def test_an_update_ratio_taken_of_a_zero_weight_is_not_drawn(lab):
    """lm_head.bias starts at zero: its step-0 update-to-weight ratio divides by telemetry's floor (~1e7). The
    page leaves it out, so panel 6's axis spans the ratios that mean something."""
    data = data_of(lab, "19-blind/01")
    pt = data["runs"][0]["per_tensor"]
    ur = pt["stats"]["ur"][pt["names"].index("lm_head.bias")]
    assert ur[0] is None and max(v for v in ur if v is not None) < 1e3


def test_the_config_lists_only_the_injection_knobs_that_applied(lab):
    c = data_of(lab, "19-injection-C")["config_applied"]
    assert {"injection_factor", "injection_param", "injection_step"} <= set(c)
    assert "injection_scale" not in c and "injection_sentence" not in c
    base = data_of(lab, "18-baseline")["config_applied"]
    assert [k for k in base if k.startswith("injection")] == ["injection"] and "lr_max" in base
