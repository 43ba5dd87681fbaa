"""experiments/index.html, the runs table (views/index.py): one row per run folder at any depth with seed, K,
injection, lr, clip, status, steps and the walker's verdict ("sealed" where the lab layer says so), and in
Chromium (file://, every other request aborted): sorting, the filter box and the ticked runs compared."""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from conftest import SMALL_K, run_cli
from minitrain.views import index


def copy_lab(small_lab: Path, dest: Path) -> Path:
    """The small lab (no checkpoints) plus a blind run: a copy of B whose manifest says blind."""
    shutil.copytree(small_lab, dest, ignore=shutil.ignore_patterns("checkpoints"))
    blind = dest / "19-blind" / "01"
    shutil.copytree(dest / "19-injection-B", blind)
    manifest = json.loads((blind / "manifest.json").read_text())
    manifest["config"]["blind"] = True
    (blind / "manifest.json").write_text(json.dumps(manifest))
    (blind.parent / "SEALED.json").write_text('{"lab": "spike"}')  # a blind lab, not revealed: its run is sealed
    (dest / "REVEALED.json").write_text('{"revealed_by": "test"}')  # the spike lab's runs are open
    return dest


@pytest.fixture(scope="module")
def exp(small_lab, tmp_path_factory):
    return copy_lab(small_lab, tmp_path_factory.mktemp("index") / "experiments")


def cells(page: str) -> dict[str, dict[str, str]]:
    """{run: {column: text}} of the rows the page holds as HTML."""
    out = {}
    for m in re.finditer(r'<tr class="[^"]*" data-run="([^"]+)">(.*?)</tr>', page, re.S):
        out[m.group(1)] = {c.group(1): c.group(2) for c in re.finditer(r'<td data-col="(\w+)"[^>]*>(.*?)</td>', m.group(2))}
    return out


def test_the_table_has_a_row_per_run_with_its_settings_and_verdict(exp):
    page = index.write_index(exp).read_text()
    rows = cells(page)
    assert sorted(rows) == ["18-baseline", "19-blind/01", "19-injection-A", "19-injection-B", "19-injection-C"]
    b = rows["19-injection-B"]
    assert (b["status"], b["steps"], b["seed"], b["K"], b["injection"]) == ("finished", "120", "42", str(SMALL_K), "bad_batch")
    assert b["lr"] == "0.0003" and b["clip"] == "1.0" and b["verdict"].startswith("§4.A") and f"at step {SMALL_K}" in b["verdict"]
    # healthy in what it measured; a run without natural_signals cannot test the logit-growth leaves, nor a
    # 120-step run the LR's size, and it says so
    assert rows["18-baseline"]["verdict"] == ("§8.A healthy (3 leaves not testable: §2.F attention_logit_growth, "
                                              "§2.G output_logit_divergence, §2.E lr_too_high)")
    assert rows["18-baseline"]["K"] == ""
    assert rows["19-blind/01"]["verdict"] == "sealed" and rows["19-blind/01"]["injection"] == "withheld"
    assert rows["19-blind/01"]["K"] == ""  # a blind run's K is withheld too
    data = json.loads(re.search(r'id="index-data">(.*?)</script>', page, re.S).group(1))
    assert data["served"] is False and len(data["series"]["19-injection-A"]["steps"]) == 120
    sealed = cells(index.write_index(exp, sealed={exp / "19-injection-B"}).read_text())  # the lab layer says which
    assert sealed["19-injection-B"]["verdict"] == "sealed" and sealed["19-blind/01"]["verdict"].startswith("§4.A")
    page = (exp / "index.html").read_text()
    assert "§4.A" not in page.split('data-run="19-injection-B"')[1].split("</tr>")[0]


def test_a_regime_map_sweep_is_one_row_and_a_damaged_run_one_line(tmp_path, small_baseline):
    exp = tmp_path / "experiments"
    shutil.copytree(small_baseline, exp / "18-baseline", ignore=shutil.ignore_patterns("checkpoints"))
    sweep = exp / "explore"
    for name in ("lr3e-4-clip1/base", "lr3e-4-clip1/scale-x50"):
        (sweep / "runs" / name).mkdir(parents=True)
        (sweep / "runs" / name / "metrics.jsonl").write_text("")
    (sweep / "cells.json").write_text("{}")
    bad = exp / "broken"
    bad.mkdir()
    (bad / "manifest.json").write_text("{not json")
    (bad / "metrics.jsonl").write_text('{"step": 0, "loss": 1}\n{"step": 0}\n')
    r = run_cli("index", str(exp), check=True)
    page = (exp / "index.html").read_text()
    assert 'href="explore/index.html"' in page and "2 runs of the minitrain explore sweep" in page
    assert "scale-x50" not in page and "wrote" in r.stdout
    row = page.split('data-run="broken"')[1].split("</tr>")[0]
    assert "manifest.json is unreadable" in row and "the walker cannot read this run" in row


def test_a_damaged_field_is_one_line_and_a_bug_is_not_data(tmp_path, small_baseline):
    """A manifest field of the wrong type is the reader's to say (one row that says so); an error in the code
    that builds the row (here the verdict) is raised, not shown as an "unreadable" run."""
    exp = tmp_path / "experiments"
    run = shutil.copytree(small_baseline, exp / "18-baseline", ignore=shutil.ignore_patterns("checkpoints"))
    manifest = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps({**manifest, "config": "seed=1"}))
    row = index.run_row(run, exp)
    assert row["status"] == "damaged" and "'config' is a string" in row["error"]

    def broken_verdict(run, sealed, live):
        return {}["leaf"]

    with pytest.raises(KeyError):
        index.run_row(run, exp, verdict=broken_verdict)


def test_in_chromium_the_table_sorts_filters_and_compares_ticked_runs(exp, browser):
    path = index.write_index(exp)
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    page, errors, network = ctx.new_page(), [], []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:")
               else (network.append(route.request.url), route.abort()))
    page.goto(path.resolve().as_uri())
    page.wait_for_function("() => window.__indexReady === true")
    order = lambda: page.eval_on_selector_all("#runs tbody tr", "trs => trs.map(t => t.dataset.run)")  # noqa: E731
    page.click('th[data-col="run"]')
    assert order() == sorted(order())
    page.click('th[data-col="run"]')  # again: reversed
    assert order() == sorted(order(), reverse=True)
    page.click('th[data-col="K"]')  # numbers, empty cells last
    assert order()[:3] == ["19-injection-A", "19-injection-B", "19-injection-C"] or \
        sorted(order()[:3]) == ["19-injection-A", "19-injection-B", "19-injection-C"]
    page.fill("#filter", "v_corrupt")
    visible = page.eval_on_selector_all("#runs tbody tr", "trs => trs.filter(t => !t.hidden).map(t => t.dataset.run)")
    assert visible == ["19-injection-C"] and "1 of 5" in page.text_content("#shown")
    page.fill("#filter", "")
    assert page.is_disabled("#compare-button")
    for run in ("18-baseline", "19-injection-A"):
        page.check(f'tr[data-run="{run}"] input.tick')
    page.click("#compare-button")
    page.wait_for_selector('#compare .cpanel[data-series="grad_norm"] canvas')
    panels = page.eval_on_selector_all("#compare .cpanel", "ps => ps.map(p => p.dataset.series)")
    assert panels == ["loss", "val_loss", "lr", "grad_norm"]
    legend = page.text_content('#compare .cpanel[data-series="loss"]')
    assert "18-baseline" in legend and "19-injection-A" in legend and "19-injection-B" not in legend
    assert not errors and not network, (errors, network)
    ctx.close()


def test_a_finished_runs_page_and_the_table_beside_it_walk_the_run_once(tmp_path, small_baseline, monkeypatch):
    """lab/runs.write_pages reads and walks the run once for its page and the runs table (readings.once);
    outside that block every read is fresh, so a run that changes is never shown stale."""
    from minitrain.analysis import readings
    from minitrain.lab.runs import write_pages

    run = shutil.copytree(small_baseline, tmp_path / "exp" / "18-baseline")
    loads: list[Path] = []
    real = readings.stability.load_evidence
    monkeypatch.setattr(readings.stability, "load_evidence", lambda r: loads.append(Path(r)) or real(r))
    assert write_pages(run)
    assert loads == [run] and (tmp_path / "exp" / "index.html").exists()
    readings.read(run)
    readings.read(run)
    assert loads == [run] * 3


def test_the_table_walks_only_the_runs_that_changed_since_it_was_last_written(tmp_path, small_lab, monkeypatch):
    """index.ROW_CACHE beside the table: a run whose files are unchanged is not walked or read again; one that
    changed is; a sealed run's verdict is never kept there; a damaged cache is ignored."""
    from minitrain.analysis import readings

    exp = copy_lab(small_lab, tmp_path / "experiments")
    first = cells(index.write_index(exp).read_text())
    loads: list[str] = []
    real = readings.stability.load_evidence
    monkeypatch.setattr(readings.stability, "load_evidence", lambda r: loads.append(Path(r).name) or real(r))
    assert cells(index.write_index(exp).read_text()) == first and loads == []
    with open(exp / "19-injection-A" / "metrics.jsonl", "ab") as f:  # the run changed: walked again
        f.write(b"")
    os.utime(exp / "19-injection-A" / "metrics.jsonl", ns=(1, 1))
    assert cells(index.write_index(exp).read_text()) == first and loads == ["19-injection-A"]
    index.write_index(exp, sealed={exp / "18-baseline"})
    cache = json.loads((exp / index.ROW_CACHE).read_text())
    assert "verdict" not in cache["runs"]["18-baseline"] and "verdict" in cache["runs"]["19-injection-B"]
    index.write_index(exp)  # no word from the lab layer: a blind run is sealed
    assert "verdict" not in json.loads((exp / index.ROW_CACHE).read_text())["runs"]["19-blind/01"]
    (exp / index.ROW_CACHE).write_text('{"code": [1, 2')  # damaged: ignored, rewritten
    loads.clear()
    assert cells(index.write_index(exp).read_text()) == first and len(loads) == 4


# --- issue 37: the folder above a run is not always minitrain's ---------------------------------------------


def imported_run(src_dir, out):
    import csv as _csv

    from conftest import run_cli

    src = src_dir / "h.csv"
    with open(src, "w", newline="") as f:
        w = _csv.writer(f)
        w.writerow(["step", "loss", "lr", "grad_norm"])
        w.writerows((s, 3 - s / 100, 1e-3, 0.5) for s in range(20))
    return run_cli("import", str(src), "--out", str(out))


def test_writing_a_run_beside_a_users_own_index_html_keeps_it(tmp_path):
    from conftest import run_cli

    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text("<h1>my site</h1>")
    proc = imported_run(tmp_path, site / "run1")
    assert proc.returncode == 0 and "is not a runs table minitrain wrote, so it is kept" in proc.stderr
    assert (site / "index.html").read_text() == "<h1>my site</h1>" and not (site / ".index-rows.json").exists()
    assert run_cli("dashboard", str(site / "run1"), "--no-baseline").returncode == 0
    assert (site / "index.html").read_text() == "<h1>my site</h1>"
    refused = run_cli("index", str(site))
    assert refused.returncode == 2 and "kept" in refused.stderr and (site / "index.html").read_text() == "<h1>my site</h1>"
    (site / "index.html").unlink()  # no page there: minitrain's table is written, and rewritten next time
    assert run_cli("index", str(site)).returncode == 0 and run_cli("index", str(site)).returncode == 0


def test_a_folder_name_that_is_not_utf8_is_one_row_not_a_crash(tmp_path):
    import os

    from conftest import run_cli
    from minitrain.views import serve

    exp = tmp_path / "exp"
    assert imported_run(tmp_path, exp / "good").returncode == 0
    odd = os.fsdecode(bytes(exp) + b"/caf\xe9")
    assert imported_run(tmp_path, odd).returncode == 0  # import writes the table beside it: no traceback
    assert run_cli("index", str(exp)).returncode == 0
    page = (exp / "index.html").read_text()
    assert "not valid UTF-8" in page and "good" in page
    server = serve.make_server(exp, port=0)
    try:
        rows = serve.Site(exp).rows()
        assert {r["status"] for r in rows} >= {"unreadable"} and any(r["run"] == "good" for r in rows)
    finally:
        server.server_close()
