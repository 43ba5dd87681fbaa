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

from conftest import ctrl_c_as_at_a_terminal, run_cli
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
    assert payload["sealed"] is True and payload["diagnosis"] is None
    assert set(payload["checks"] or {"signals": 0}) == {"signals"}  # no answer in a sealed page: measurements only
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


def test_a_run_folder_serves_its_parent_and_never_lists_checkpoints_as_runs(small_lab, tmp_path):
    run = small_lab / "18-baseline"
    assert any((run / "checkpoints").iterdir())
    root, start, note = serve.site_root(run)
    assert root == small_lab.resolve() and start == "/view?run=18-baseline" and "run folder: serving its parent" in note
    s = Served(root)
    try:
        code, rows = s.json("/api/runs")
        names = [r["run"] for r in rows]
        assert code == 200 and "18-baseline" in names and not any("checkpoints" in n for n in names)
    finally:
        s.close()
    proc = subprocess.Popen([sys.executable, "-m", "minitrain", "serve", str(run), "--port", "0"],
                            stderr=subprocess.PIPE, text=True, preexec_fn=ctrl_c_as_at_a_terminal)
    lines = [proc.stderr.readline() for _ in range(3)]
    proc.send_signal(signal.SIGINT)
    proc.wait()
    assert "/view?run=18-baseline" in lines[0] and "is a run folder: serving its parent" in lines[1]
    assert "outside it (--out elsewhere) is not among them" in lines[2]  # why a run trained elsewhere is missing


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
        # every section that depends on the data is drawn again, not only the curves
        assert page.text_content("#zoom-range") == "steps 0\u201311" and page.text_content("#status-badge") == "running"
        assert "partial: steps 0-11" in page.text_content("#health")
        probe.close()  # the run ends: the badge and the verdict say so without a reload
        page.wait_for_function("() => document.getElementById('status-badge').textContent !== 'running'")
        page.wait_for_function("() => !document.getElementById('health').textContent.includes('partial')")
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


# --- issue 37: the server under attack ---------------------------------------------------------------


def raw_get(base: str, path: str, host: str | None) -> int:
    """The status of GET PATH sent with this Host header (None: no Host header at all)."""
    import http.client

    port = int(base.rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port)
    conn.putrequest("GET", path, skip_host=True)
    if host is not None:
        conn.putheader("Host", host)
    conn.endheaders()
    status = conn.getresponse().status
    conn.close()
    return status


def test_a_foreign_host_reads_nothing(site):
    """DNS rebinding: a page at evil.example whose name now resolves to 127.0.0.1 sends Host: evil.example."""
    port = site.base.rsplit(":", 1)[1]
    for path in ("/", "/api/runs", "/api/payload?run=18-baseline", "/file/18-baseline/dashboard.html"):
        for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.evil.example", f"127.0.0.1:{int(port) + 1}", None):
            assert raw_get(site.base, path, host) == 421, (path, host)
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "localhost"):
        assert raw_get(site.base, "/api/runs", host) == 200, host


def test_file_serves_only_minitrains_pages_and_sandboxes_them(site):
    import urllib.request

    (site.exp / "18-baseline" / "notes.html").write_text("<script>fetch('/api/payload?run=19-injection-A')</script>")
    (site.exp / "18-baseline" / "plot.svg").write_text("<svg xmlns='http://www.w3.org/2000/svg'><script>1</script></svg>")
    (site.exp / "index.html").write_text("<p>someone's page</p>")
    for path in ("/file/18-baseline/notes.html", "/file/18-baseline/plot.svg", "/file/index.html"):
        assert site.get(path)[0] == 404, path
    run_cli("dashboard", str(site.exp / "18-baseline"), "--no-baseline", check=True)
    with urllib.request.urlopen(site.base + "/file/18-baseline/dashboard.html") as r:
        csp = r.headers["Content-Security-Policy"]
        assert r.status == 200 and csp.startswith("sandbox ") and "allow-same-origin" not in csp
        assert "connect-src" not in csp and "default-src 'none'" in csp


def test_a_link_in_the_served_folder_is_not_a_row(site, tmp_path):
    """A symlinked run from outside, and a link with a neutral name to a sealed lab run: neither is listed
    (the table would show a verdict /view refuses, or a sealed run's answer under another name)."""
    outside = tmp_path / "outside"
    shutil.copytree(site.exp / "18-baseline", outside)
    (site.exp / "from-outside").symlink_to(outside, target_is_directory=True)
    (site.exp / "neutral").symlink_to(site.exp / "19-injection-B", target_is_directory=True)
    code, rows = site.json("/api/runs")
    names = {r["run"] for r in rows}
    assert code == 200 and "from-outside" not in names and "neutral" not in names and "19-injection-B" in names


def test_a_client_gone_mid_answer_is_no_traceback(site):
    """A browser aborts its polls on every navigation: the answer's write fails, and nothing is raised."""
    import socket

    here, there = socket.socketpair()
    port = site.server.server_address[1]
    there.sendall(f"GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    there.close()  # gone before the answer
    site.server.RequestHandlerClass(here, ("127.0.0.1", 0), site.server)  # handles the request, here and now
    here.close()


@pytest.mark.parametrize("port", ["70000", "-1"])
def test_a_port_out_of_range_or_an_empty_host_is_one_line(tmp_path, port):
    from conftest import assert_one_line_error
    from minitrain.core.errors import UserError

    assert_one_line_error(run_cli("serve", str(tmp_path), "--port", port), "from 1 to 65535")
    with pytest.raises(UserError, match="--host is empty"):  # it would listen on every interface
        serve.make_server(tmp_path, 0, "")


def test_every_interface_is_said_aloud(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "minitrain", "serve", str(tmp_path), "--port", "0", "--host", "0.0.0.0"],
                            stderr=subprocess.PIPE, text=True, preexec_fn=ctrl_c_as_at_a_terminal)
    try:
        warning = proc.stderr.readline()
        assert "warning: listening on 0.0.0.0" in warning and "every machine" in warning
        assert "http://0.0.0.0:" in proc.stderr.readline()
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait()
