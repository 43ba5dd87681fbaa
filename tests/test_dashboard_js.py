"""The dashboard script's pure helpers (views/assets/helpers.js), run in the headless Chromium the browser
tests use: a blank page loads uPlot and helpers.js alone, each case is evaluated there and checked here.
Skipped with the browser tests when chromium or playwright is missing."""
from __future__ import annotations

import re

import pytest

from minitrain.analysis import panels
from minitrain.views import dashboard, explore, index, lrsweep


@pytest.fixture(scope="module")
def js(browser):  # noqa: F811
    """evaluate(expression) in a page holding uPlot and helpers.js and nothing else."""
    context = browser.new_context()
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.route("**/*", lambda route: route.abort())
    page.set_content("<!DOCTYPE html><html><body></body></html>")
    for name in (dashboard.UPLOT[0], "helpers.js"):
        page.add_script_tag(content=dashboard.asset(name))
    yield lambda expression: page.evaluate(f"() => {expression}")
    assert errors == []
    context.close()


def test_ema_is_debiased_and_skips_missing_values(js):
    assert js("helpers.ema([2, 2, 2], 0.9)") == pytest.approx([2, 2, 2], rel=1e-12)  # no pull towards 0
    # 1, then (0.5 * 0.5 + 0.5 * 3) / (1 - 0.5^2): the missing value neither counts nor breaks the average
    assert js("helpers.ema([1, null, 3, NaN], 0.5)") == [1, None, pytest.approx(7 / 3, rel=1e-12), None]
    assert js("helpers.ema([5, -1, 4], 0)") == [5, -1, 4]  # weight 0: the raw values
    assert js("helpers.ema([], 0.9)") == []


def test_numbers_are_formatted_for_the_tooltip_and_the_axes(js):
    cases = js("""[null, undefined, 0, 1234.5678, -0.5, 0.001, 0.00012345, 123456, 'x']
                  .map(v => helpers.fmt(v)).concat([helpers.fmt(2.3456, 3), helpers.fmt(1 / 3, 6)])""")
    assert cases == ["\u2014", "\u2014", "0", "1234.6", "-0.5", "0.001", "1.2345e-4", "1.2346e5", "x", "2.35",
                     "0.333333"]
    ticks = js("[0, 0.0001, 3e-4, 12500, 2.5, 0.123456, 1e-3].map(helpers.tick)")
    assert ticks == ["0", "1e-4", "3e-4", "1.25e4", "2.5", "0.1235", "0.001"]
    # a log axis labels 1, 2 and 5 of a decade over 3 decades or fewer, and only the 1s over more
    assert js("helpers.logTickLabels([1, 2, 3, 5, 10, 20], 1, 100)") == ["1", "2", "", "5", "10", "20"]
    assert js("helpers.logTickLabels([1, 2, 5, 10], 1, 1e5)") == ["1", "", "", "10"]


def test_y_range_of_each_kind_of_panel(js):
    def rng(lo, hi, how):
        return js(f"helpers.yRange({lo}, {hi}, {how})")

    assert rng(1, 3, "{}") == pytest.approx([0.9, 3.1])  # 5% margin each side
    assert rng(1, 3, "{fromZero: true}") == pytest.approx([0, 3.15])  # from 0
    assert rng(5, 5, "{}") == pytest.approx([4.975, 5.025])  # flat data: 10% of its value as the span
    assert rng("null", "null", "{}") == [0, 1]
    assert rng(0.03, 7, "{log: true}") == pytest.approx([0.01, 10])  # whole decades
    assert rng(0, 7, "{log: true}") == [0.1, 1]  # nothing positive to draw on a log axis
    # a difference: symmetric around 0, and never narrower than the float-rounding bound
    assert rng(-1e-7, 2e-7, "{symmetric: true}") == pytest.approx([-2.1e-7, 2.1e-7])
    assert rng(-1e-7, 2e-7, "{symmetric: true, bound: 1e-6}") == pytest.approx([-1.2075e-6, 1.2075e-6])
    assert rng("null", "null", "{symmetric: true}") == [-1.05, 1.05]


def test_the_nearest_point_finds_a_spike_where_the_cursor_is(js):
    js("(window.xs = Array.from({length: 1000}, (_, i) => i), window.ys = xs.map(i => i === 500 ? 1e6 : 1), 0)")
    at = js("[500, 500.4, 499.6, 500.5, 500.51, -3, 0, 999, 1e9].map(x => helpers.nearestIndex(xs, x))")
    assert at == [500, 500, 500, 500, 501, 0, 0, 999, 999]  # a tie goes to the earlier step
    assert js("helpers.pointAt(xs, ys, helpers.nearestIndex(xs, 500), false)") == {"x": 500, "y": 1e6}
    # a spike on the last step is found there too, and from beyond the end of the data
    js("(window.last = xs.map(i => i === 999 ? -1e6 : 1), 0)")
    assert js("helpers.pointAt(xs, last, helpers.nearestIndex(xs, 2000), false)") == {"x": 999, "y": -1e6}
    # steps with gaps between them (a sampled signal)
    assert js("[14, 15, 16, 25].map(x => helpers.nearestIndex([0, 10, 20], x))") == [1, 1, 2, 2]
    assert js("[helpers.nearestIndex([], 3), helpers.nearestIndex([7], -1e9)]") == [-1, 0]


def test_a_sampled_series_shows_its_last_point_at_or_before_the_cursor(js):
    xs, ys = "[10, 20, 30, 40]", "[null, 1.5, null, null]"
    assert js(f"helpers.pointAt({xs}, {ys}, 3, true)") == {"x": 20, "y": 1.5}  # carried from step 20
    assert js(f"helpers.pointAt({xs}, {ys}, 3, false)") is None  # a per-step series has no value at step 40
    assert js(f"helpers.pointAt({xs}, {ys}, 0, true)") is None  # nothing measured yet
    assert js(f"helpers.pointAt({xs}, [0, 2, 3, 4], 0, false)") == {"x": 10, "y": 0}  # 0 is a value


def test_every_series_spec_names_a_signal_of_its_panel():
    assert all(p.series for p in panels.PANELS)  # the page draws every panel from its specs
    assert {s.per for p in panels.PANELS for s in p.series} <= {"step", "sample", "layer", "tensor"}
    with pytest.raises(ValueError, match="not among its signals"):
        panels.Panel(99, "x", "X", "x", ("loss",), series=(panels.Series("lr", "learning rate"),))


def test_the_page_script_is_the_modules_in_order_in_one_closure():
    script = dashboard.page_script()
    starts = [script.index(dashboard.asset(name)) for name in dashboard.PAGE_SCRIPTS]
    assert starts == sorted(starts) and script.startswith(dashboard.asset(dashboard.UPLOT[0]))
    assert "\n(function () {\n" in script and script.rstrip().endswith("})();")


def test_one_el_makes_elements_with_a_class_or_attributes_and_text_only(js):
    assert js("helpers.el('td', 'k', 3).outerHTML") == '<td class="k">3</td>'
    assert js("helpers.el('a', {href: 'r/dashboard.html', title: 'x'}, '<b>').outerHTML") == \
        '<a href="r/dashboard.html" title="x">&lt;b&gt;</a>'  # text stays text
    assert js("helpers.el('div').outerHTML") == "<div></div>"
    assert js("[helpers.color(0), helpers.color(helpers.PALETTE.length)]") == [js("helpers.PALETTE[0]")] * 2


PAGES = {"dashboard.html": dashboard.PAGE_SCRIPTS, "index.html": index.INDEX_SCRIPTS,
         "explore.html": explore.PAGE_SCRIPTS, "lrsweep.html": lrsweep.PAGE_SCRIPTS}


@pytest.mark.parametrize("template", sorted(PAGES))
def test_no_template_holds_code_of_its_own(template):
    """Every page's code is an asset module (tested here, judged by tests/test_architecture.py), put in by the
    page's {{JS}}: the templates' script elements hold that placeholder or the page's JSON data, nothing else."""
    html = dashboard.asset(template)
    scripts = re.findall(r"<script([^>]*)>(.*?)</script>", html, re.S)
    assert [body.strip() for attrs, body in scripts if "application/json" not in attrs] == ["{{JS}}"]
    assert PAGES[template][0] == "helpers.js" and all(dashboard.asset(name) for name in PAGES[template])


LRSWEEP = {"grid": "tiny", "steps": 4, "warmup_steps": 2, "seed": 1, "preset": "course", "params": 1000,
           "commit": None, "lrs": [1e-3, 1e-2, 1e-1],
           "variants": [{"name": "plain", "what": "the model"}, {"name": "qk_norm", "what": "qk-layernorm"}],
           "sensitivity": {"plain": {"sensitivity": 0.5, "best_loss": 2.0, "best_lr": 1e-3}}, "claims": [],
           "natural_cases": [], "failures": {"plain@1e-1": "diverged (non-finite at step 3)"},
           "runs": [{"variant": v, "lr": lr, "diverged": v == "plain" and lr == 1e-1, "diverged_at": 3,
                     "final_loss": None if v == "plain" and lr == 1e-1 else 2.0 + lr, "initial_loss": 4.0,
                     "final_val_loss": None, "attn_logit_max": 10 * lr if v == "plain" else None,
                     "attn_entropy_min": None, "logz_mean_far": None, "rms_max": None, "spikes": [],
                     "dashboard": f"runs/{v}/dashboard.html"} for v in ("plain", "qk_norm") for lr in (1e-3, 1e-2, 1e-1)]}


def test_the_lr_sweep_page_draws_with_the_shared_chart_code(browser, tmp_path):
    out = lrsweep.write(tmp_path, LRSWEEP)
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:") else route.abort())
    page.goto(out.resolve().as_uri())
    page.wait_for_function("() => window.__lrsweepReady === true")
    assert page.locator(".chart[data-field=final_loss] .uplot").count() == 1  # chart.js's lines(), on uPlot
    legend = page.locator(".chart[data-field=final_loss] .u-legend").inner_text()
    assert "plain" in legend and "qk_norm" in legend and "plain diverged" in legend
    assert page.locator(".chart[data-field=attn_logit_max] .uplot").count() == 1
    assert "no run carries this signal" in page.locator(".chart[data-field=rms_max]").inner_text()
    assert page.locator("td.failed").count() == 1 and errors == []
    page.close()
