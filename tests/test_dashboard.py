"""dashboard.html and experiments/index.html: content, escaping, damaged data, and a real headless browser.

One tiny lab is trained once for the module: a 60-step baseline (checkpoints every 20) and two injection
runs at K=30 forked from it (bad_batch and v_corrupt). The browser tests drive Debian's chromium through
Playwright with every network request aborted; they are skipped when chromium is not installed.
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from minitrain import loop
from minitrain.lab.runs import train_run, write_pages
from minitrain.views import dashboard
from minitrain.cli import main
from minitrain.core.config import build_config
from minitrain.core.errors import UserError

K = 30
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
HOSTILE = '</script><script>alert("x")</script><img src=x onerror=alert(1)> & <!--'


def tiny(**extra) -> "TrainConfig":  # noqa: F821
    sets = ["steps=60", "ckpt_every=20", "eval_every=10", "spectral_every=10", "progress=false"]
    return build_config({}, sets + [f"{k}={v}" for k, v in extra.items()])


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Path:
    exp = tmp_path_factory.mktemp("dash") / "experiments"
    train_run(tiny(), exp / "18-baseline")
    train_run(tiny(injection="bad_batch", injection_step=K), exp / "19-injection-B")
    train_run(tiny(injection="v_corrupt", injection_step=K), exp / "19-injection-C")
    return exp


def embedded(page: str) -> dict:
    """The JSON data block of a dashboard page."""
    m = re.search(r'<script type="application/json" id="dashboard-data">(.*?)</script>', page, re.S)
    assert m, "no data block"
    return json.loads(m.group(1))


def copy_run(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("checkpoints", "dashboard.html"))
    return dst


# ---------------------------------------------------------------------------------------------------
# Content (no browser)
# ---------------------------------------------------------------------------------------------------


def test_every_run_writes_its_dashboard_with_baseline_found(lab):
    for name in ("18-baseline", "19-injection-B", "19-injection-C"):
        assert (lab / name / "dashboard.html").is_file(), f"{name}: loop did not write dashboard.html"
    data = embedded((lab / "19-injection-B" / "dashboard.html").read_text())
    assert data["baseline"]["name"] == "18-baseline"
    # forked from the baseline: identical rows before K, so the exact difference starts at K
    assert data["baseline"]["diff"]["first_difference"] == K
    assert data["baseline"]["diff"]["loss"][:K] == [0.0] * K
    k_markers = [m for m in data["markers"] if m["kind"] == "k"]
    assert k_markers and k_markers[0]["step"] == K and "bad_batch" in k_markers[0]["label"]
    assert "She has written the letter." in k_markers[0]["label"]
    assert embedded((lab / "18-baseline" / "dashboard.html").read_text())["baseline"] is None


def test_movers_find_the_corrupted_second_moment(lab):
    data = embedded((lab / "19-injection-C" / "dashboard.html").read_text())
    top = data["movers"]["vm"][0]
    assert top["name"] == "lm_head.bias" and top["step"] == K and top["factor"] > 30, data["movers"]["vm"]
    assert len(data["movers"]["ur"]) <= dashboard.MOVERS


def test_health_summary(lab):
    data = embedded((lab / "19-injection-B" / "dashboard.html").read_text())
    health = {h["label"]: h for h in data["health"]}
    assert health["step-0 loss"]["verdict"] == "ok" and "ln 512" in health["step-0 loss"]["value"]
    assert health["clip rate"]["value"].startswith("60 of 60 steps")  # clipping engages on every step here
    assert health["non-finite values"]["verdict"] == "ok"
    assert "n-gram" in health["final val loss"]["value"]


def test_embed_json_leaves_nothing_that_closes_a_script():
    text = dashboard.embed_json({"s": HOSTILE, "u": "\u2028ñ"})
    assert not set("<>&") & set(text) and "\u2028" not in text
    assert json.loads(text) == {"s": HOSTILE, "u": "\u2028ñ"}


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
    assert data["steps"][-1] == 44
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
    assert data["series"]["loss"][40] is None
    health = {h["label"]: h for h in data["health"]}
    assert health["non-finite values"]["verdict"] == "bad" and "step 40" in health["non-finite values"]["value"]
    assert any(m["kind"] == "nonfinite" and m["step"] == 40 for m in data["markers"])


def test_index_links_every_run(lab):
    page = dashboard.write_index(lab).read_text()
    for name in ("18-baseline", "19-injection-B", "19-injection-C"):
        assert f'href="{name}/dashboard.html"' in page
    assert "bad_batch at K=30" in page and "v_corrupt at K=30" in page and "finished" in page
    assert "vs n-gram" in page and "<script" not in page


def test_cli_dashboard_and_index(lab, tmp_path, capsys):
    out = tmp_path / "page.html"
    assert main(["dashboard", str(lab / "19-injection-B"), "--no-baseline", "--out", str(out)]) == 0
    assert embedded(out.read_text())["baseline"] is None
    assert main(["dashboard", str(lab / "19-injection-C"), "--baseline", str(lab / "19-injection-B"),
                 "--out", str(out)]) == 0
    assert embedded(out.read_text())["baseline"]["name"] == "19-injection-B"
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
    assert [c["name"] for c in data["compare"]] == [hostile.name]
    # its own exact difference to the baseline, the same numbers as on its own page
    own = embedded((lab / "19-injection-B" / "dashboard.html").read_text())["baseline"]["diff"]
    assert data["compare"][0]["diff"] == own and own["first_difference"] == K
    assert embedded((lab / "19-injection-B" / "dashboard.html").read_text())["compare"] == []
    with pytest.raises(UserError, match="already on the page"):
        dashboard.write_dashboard(lab / "19-injection-C", baseline=lab / "18-baseline", out=out,
                                  compare=[lab / "18-baseline"])
    assert main(["dashboard", str(lab / "19-injection-C"), "--compare", str(lab / "19-injection-B"),
                 "--out", str(out)]) == 0
    assert "compared: 19-injection-B" in capsys.readouterr().out
    assert [c["name"] for c in embedded(out.read_text())["compare"]] == ["19-injection-B"]
    assert main(["dashboard", str(lab / "19-injection-C"), "--compare", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--compare" in err


def test_a_failing_dashboard_never_loses_the_run(tmp_path, monkeypatch, capsys):
    def broken(*a, **k):
        raise RuntimeError("boom")

    (tmp_path / "metrics.jsonl").write_text("")
    monkeypatch.setattr(dashboard, "write_dashboard", broken)
    write_pages(tmp_path)  # must not raise
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "warning: dashboard.html not written" in err and "boom" in err


# ---------------------------------------------------------------------------------------------------
# A real browser, network blocked
# ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        pytest.skip(f"chromium is not installed at {CHROMIUM} (Debian: apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the playwright python package is not installed (pip install -e '.[test]')")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield b
        b.close()


class Opened:
    """A page opened from file:// with every non-file request aborted and recorded, errors collected."""

    def __init__(self, browser, path: Path):
        self.page = browser.new_page(viewport={"width": 1400, "height": 900})
        self.network, self.errors, self.dialogs = [], [], []
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        self.page.on("request", lambda r: r.url.startswith("file:") or self.network.append(r.url))
        self.page.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:")
                        else (self.network.append(route.request.url), route.abort()))
        self.page.goto(path.resolve().as_uri())
        self.page.wait_for_function("window.__dashboardReady === true", timeout=30_000)

    def check_clean(self):
        assert self.network == [], f"network requests were made: {self.network}"
        assert self.errors == [], f"console errors: {self.errors}"
        assert self.dialogs == []


EXPECTED_PANELS = ["Loss (log scale)", "Gradient norm, before and after clipping", "Injected minus baseline: loss",
                   "Injected minus baseline: gradient norm", "Learning rate",
                   "Loss on regular vs irregular verbs (log scale)", "Per-tensor update-to-weight ratio (log scale)",
                   "Per-tensor Adam second moment (mean of v) (log scale)", "Mean absolute activation per layer",
                   "Batch composition: shares", "Spectral norm \u03c3max of weight matrices (log scale)"]


def test_browser_renders_offline_with_panels_and_k_marker(lab, browser):
    view = Opened(browser, lab / "19-injection-B" / "dashboard.html")
    page = view.page
    titles = page.locator(".panel h2").all_text_contents()
    for t in EXPECTED_PANELS:
        assert t in titles, f"missing panel {t!r} in {titles}"
    n_panels = page.locator(".panel").count()
    assert page.locator(".marker-k[data-step='30'] line").count() == n_panels  # K on every panel
    assert page.locator(".marker-warmup").count() == 0  # warmup (100 steps) ends after this 60-step run
    assert "K=30: bad_batch" in page.locator("#panel-loss").inner_text()
    assert "step-0 loss" in page.locator("#health").inner_text()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard.png"))
    view.check_clean()


def test_browser_zoom_and_hover_are_shared(lab, browser):
    view = Opened(browser, lab / "19-injection-B" / "dashboard.html")
    page = view.page
    box = page.locator("#panel-loss svg").bounding_box()
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * 0.3, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.6, y, steps=5)
    page.mouse.up()
    domains = {(p.get_attribute("data-x0"), p.get_attribute("data-x1")) for p in page.locator(".panel").all()}
    assert len(domains) == 1, domains  # every panel shows the same steps
    x0, x1 = map(float, domains.pop())
    assert 0 < x0 < x1 < 59, (x0, x1)
    page.mouse.move(box["x"] + box["width"] * 0.5, y)
    readout = page.locator("#panel-grad .readout").inner_text()  # hovering the loss plot reads out grad norm
    assert re.match(r"step \d+", readout) and "pre-clip" in readout
    page.locator("#reset-zoom").click()
    assert page.locator("#panel-lr").get_attribute("data-x1") == "59"
    view.check_clean()


def test_browser_damaged_and_hostile_runs(lab, browser, tmp_path):
    killed = truncated_copy(lab, tmp_path / "killed")
    view = Opened(browser, dashboard.write_dashboard(killed))
    assert "metrics end at step 44" in view.page.locator("#data-note").inner_text()
    assert view.page.locator(".marker-end").count() > 0
    view.check_clean()

    nan = nonfinite_copy(lab, tmp_path / "nan")
    view = Opened(browser, dashboard.write_dashboard(nan))
    assert view.page.locator(".marker-nonfinite[data-step='40']").count() > 0
    view.check_clean()

    run = copy_run(lab / "19-injection-B", tmp_path / "x <script>alert(2) <i>")
    (run / "diagnosis.json").write_text(json.dumps({"leaf": HOSTILE, "anomaly_step": K}))
    view = Opened(browser, dashboard.write_dashboard(run))
    assert view.page.locator("h1").inner_text() == run.name  # shown as text, not parsed
    assert HOSTILE in view.page.locator("#diagnosis").inner_text()
    assert view.page.locator("img").count() == 0 and view.page.locator("script").count() == 2
    view.check_clean()


def test_browser_draws_a_compared_run(lab, browser, tmp_path):
    out = dashboard.write_dashboard(lab / "19-injection-C", baseline=lab / "18-baseline", out=tmp_path / "cmp.html",
                                    compare=[lab / "19-injection-B"])
    view = Opened(browser, out)
    page = view.page
    assert "compared: 19-injection-B" in page.locator("header").inner_text()
    assert "19-injection-B (EMA)" in page.locator("#panel-loss .legend").inner_text()
    assert "19-injection-B pre-clip" in page.locator("#panel-grad .legend").inner_text()
    assert "19-injection-B: train loss difference" in page.locator("#panel-diff-loss .legend").inner_text()
    assert "19-injection-B: pre-clip grad norm difference" in page.locator("#panel-diff-grad .legend").inner_text()
    colours = {p.get_attribute("stroke") for p in page.locator("#panel-diff-loss path.series").all()}
    assert len(colours) >= 2, colours  # this run's difference and the compared run's, in different colours
    box = page.locator("#panel-loss svg").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.7, box["y"] + box["height"] / 2)
    assert "19-injection-B" in page.locator("#panel-grad .readout").inner_text()
    assert "19-injection-B" in page.locator("#panel-diff-loss .readout").inner_text()
    view.check_clean()
