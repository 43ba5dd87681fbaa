"""`minitrain serve` (views/serve.py): nothing outside the experiments folder is served (.., %2e%2e, a symlink
out), sealed lab runs stay sealed, a run deleted or corrupted while served is one line, Ctrl-C stops it, and
in Chromium a run's curves and the table's step count follow a run while it trains (a probe run the test
steps itself, so the page is seen before, during and after new rows without any timing guess)."""
from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import torch

from conftest import ctrl_c_as_at_a_terminal
from minitrain.views import serve


class Served:
    def __init__(self, experiments: Path):
        self.server = serve.make_server(experiments, port=0)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self.thread.start()

    def get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.base + path) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def json(self, path: str):
        code, body = self.get(path)
        return code, json.loads(body)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def site(small_lab, tmp_path):
    exp = tmp_path / "experiments"
    shutil.copytree(small_lab, exp, ignore=shutil.ignore_patterns("checkpoints"))
    s = Served(exp)
    s.exp = exp
    yield s
    s.close()


def test_nothing_outside_the_experiments_folder_is_served(site, tmp_path):
    secret = tmp_path / "secret"
    shutil.copytree(site.exp / "18-baseline", secret)  # a run folder outside, and a plain file
    (tmp_path / "passwords.html").write_text("TOPSECRET")
    (site.exp / "link-out").symlink_to(secret, target_is_directory=True)
    (site.exp / "page-out.html").symlink_to(tmp_path / "passwords.html")
    for path in ("/view?run=../secret", "/view?run=%2e%2e/secret", "/view?run=%2e%2e%2fsecret",
                 "/view?run=/etc", "/view?run=link-out", "/api/payload?run=link-out", "/api/steps?run=..",
                 "/file/../passwords.html", "/file/%2e%2e/passwords.html", "/file/..%2fpasswords.html",
                 "/file/page-out.html", "/file/link-out/manifest.json", "/file/18-baseline/metrics.jsonl",
                 "/file//etc/passwd", "/etc/passwd"):
        code, body = site.get(path)
        assert code == 404 and b"TOPSECRET" not in body and b'"loss"' not in body, path
    code, body = site.get("/view?run=18-baseline")
    assert code == 200 and b"live-status" in body and b"connect-src 'self'" in body


def test_sealed_runs_stay_sealed_and_a_deleted_or_corrupt_run_is_one_line(site):
    code, rows = site.json("/api/runs")
    by = {r["run"]: r for r in rows}
    assert code == 200 and by["19-injection-B"]["verdict"] == "sealed"  # the spike lab is not revealed here
    assert by["18-baseline"]["verdict"].startswith("§8.A healthy (")  # with the leaves it could not test
    code, payload = site.json("/api/payload?run=19-injection-B")
    assert payload["sealed"] is True and payload["diagnosis"] is None and payload["checks"] is None  # no answer at all in a sealed page
    _, page = site.get("/")
    assert b"\xc2\xa74.A" not in page  # no leaf of a sealed run anywhere in the served table
    code, steps = site.json("/api/steps?run=19-injection-A&run=18-baseline")
    assert steps == {"19-injection-A": {"last": 119, "live": False}, "18-baseline": {"last": 119, "live": False}}
    shutil.rmtree(site.exp / "19-injection-A")  # deleted while served
    code, err = site.json("/api/steps?run=19-injection-A")
    assert code == 404 and "no run folder" in err["error"] and "\n" not in err["error"]
    (site.exp / "19-injection-C" / "metrics.jsonl").write_text('{"step": 3}\n{"step": 1}\n{"step": 2}\n')
    code, err = site.json("/api/payload?run=19-injection-C")
    assert code == 404 and "repeated or unordered steps" in err["error"]
    code, page = site.get("/view?run=19-injection-C")
    assert code == 404 and b'id="error"' in page
    code, rows = site.json("/api/runs")  # the table still answers, with a line for the damaged run
    by = {r["run"]: r for r in rows}
    assert code == 200 and "19-injection-A" not in by and by["19-injection-C"]["verdict"] == "sealed"
    assert site.get("/")[0] == 200


def test_ctrl_c_stops_the_server(tmp_path):
    (tmp_path / "experiments").mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "minitrain", "serve", str(tmp_path / "experiments"), "--port", "0"],
                            stderr=subprocess.PIPE, text=True, preexec_fn=ctrl_c_as_at_a_terminal)
    line = proc.stderr.readline()  # "minitrain serve: ... at http://127.0.0.1:PORT/": it listens
    assert "http://127.0.0.1:" in line
    with urllib.request.urlopen(line.split(" at ")[1].split()[0]) as r:
        assert r.status == 200 and b"no run folders here yet" in r.read()
    proc.send_signal(signal.SIGINT)
    assert proc.wait() == 0 and "stopped" in proc.stderr.read()


def test_in_chromium_the_curves_and_the_table_follow_a_run_while_it_trains(tmp_path, browser):
    from minitrain.probe import attach

    exp = tmp_path / "experiments"
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(32, 16), torch.nn.Linear(16, 32))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    probe = attach(model, opt, exp / "live-run")

    def train(n):
        for _ in range(n):
            ids = torch.randint(0, 32, (4, 8))
            loss = torch.nn.functional.cross_entropy(model(ids).flatten(0, 1), ids.flatten())
            opt.zero_grad()
            loss.backward()
            probe.log(loss, ids)
            opt.step()

    train(5)
    site = Served(exp)
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    page, errors = ctx.new_page(), []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(site.base + "/")
        page.wait_for_function("() => window.__indexReady === true")
        assert page.text_content('tr[data-run="live-run"] td[data-col="status"]') == "running"
        page.goto(site.base + "/view?run=live-run")
        page.wait_for_function("() => window.__dashboardReady === true")
        steps = "() => window.__dashboard.plots.find(p => p.spec.key === 'loss').u.data[0].length"
        assert page.evaluate(steps) == 5
        page.wait_for_function("() => document.getElementById('live-status').textContent.includes('step 4 (training)')")
        page.click("#reset-zoom")
        train(7)  # new rows while the page is open: the curve grows without a reload
        page.wait_for_function(f"() => ({steps})() === 12")
        assert page.evaluate("() => window.__dashboard.state.full") == [0, 11]
        assert "step 11 (training)" in page.text_content("#live-status")
        probe.close()
        page.goto(site.base + "/")
        page.wait_for_function("() => window.__indexReady === true")
        page.wait_for_function("() => document.querySelector('tr[data-run=\"live-run\"] td[data-col=\"steps\"]').textContent === '12'")
        shutil.rmtree(exp / "live-run")  # deleted while the table polls: its row goes, the page stays
        page.wait_for_function("() => !document.querySelector('tr[data-run=\"live-run\"]')")
        assert not errors, errors
    finally:
        ctx.close()
        site.close()
        probe.close()
