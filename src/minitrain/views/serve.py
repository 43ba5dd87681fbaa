"""`minitrain serve [EXPERIMENTS] [--port P]`: the runs table and every run's dashboard, live, on a local port.

    /                          the runs table (views/index.py), its steps, status and verdicts polled every 2 s
    /view?run=A[&run=B...]     the dashboard of run A (with its baseline), or of A with B... compared: the page
                               `minitrain dashboard` writes, plus assets/live.js, which polls /api/steps and
                               redraws the curves when a run has new rows (no reload: zoom and toggles stay)
    /api/runs                  the table's rows as JSON
    /api/steps?run=A...        {run: its last written step}: cheap (reads the metrics file's tail)
    /api/payload?run=A...      the dashboard's data, rebuilt from the files (only when a step changed)
    /file/PATH                 a page or image a run folder holds (dashboard.html, a regime map's index.html)

The standard library's ThreadingHTTPServer is enough: one user on 127.0.0.1, a handful of small JSON
requests a second, pages built by code that already exists. A web framework would add a dependency and an
event loop for nothing this needs, and polling keeps the page's code as simple as the static page's.

Safety: it binds 127.0.0.1 unless told otherwise; a run or file is looked up under EXPERIMENTS after
resolving it (so "..", "%2e%2e" and a symlink that leads out are all refused with 404); it serves generated
pages and the few file kinds in SERVED_FILES, nothing else. Sealed runs: run/sealing.py's rule
decides, as the files do: no verdict in the table, the dashboard's sealed page.
`serve RUN_FOLDER` serves the run's parent and opens the run's page (a run folder's checkpoints are not runs).
A run folder deleted, half-written or corrupted while it is served gives one line (in the table's row, in
the dashboard's live line), never a crash; Ctrl-C stops the server and returns.
"""
from __future__ import annotations

import json
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlsplit

from minitrain.core.errors import UserError
from minitrain.run import files, reader, sealing
from minitrain.views import dashboard, index

HOST = "127.0.0.1"
SERVED_FILES = {".html": "text/html; charset=utf-8", ".png": "image/png", ".svg": "image/svg+xml",
                ".csv": "text/csv; charset=utf-8", ".md": "text/plain; charset=utf-8"}
LIVE_SCRIPT = "live.js"


class Site:
    """What the server shows for one experiments folder: resolved paths, sealed state, cached verdicts."""

    def __init__(self, experiments: Path):
        self.root = Path(experiments).resolve()
        self.is_sealed = sealing.is_sealed
        self.lock = threading.Lock()
        self.verdicts: dict = {}  # (run, metrics size, mtime, sealed) -> text: the walker runs once per change

    def run_dir(self, rel: str) -> Path:
        """The run folder `rel` names under the root, or a UserError (404): nothing outside the root."""
        path = self.inside(rel)
        if not path.is_dir() or not files.is_run_dir(path):
            raise UserError(f"no run folder {rel!r} under {self.root.name}")
        return path

    def inside(self, rel: str) -> Path:
        rel = unquote(str(rel or ""))
        if not rel or rel.startswith(("/", "\\")) or any(part == ".." for part in rel.replace("\\", "/").split("/")):
            raise UserError(f"{rel!r} is not a path inside {self.root.name}")
        path = (self.root / rel).resolve()  # a symlink is followed, then must still be inside
        if path != self.root and self.root not in path.parents:
            raise UserError(f"{rel!r} is not a path inside {self.root.name}")
        return path

    def verdict(self, run: Path, sealed: bool, live: bool) -> str:
        if sealed or live:
            return index.verdict_text(run, sealed, live)
        key = (str(run), repr(index.run_stamp(run)))
        with self.lock:
            if key in self.verdicts:
                return self.verdicts[key]
        text = index.verdict_text(run, sealed, live)
        with self.lock:
            self.verdicts[key] = text
        return text

    def rows(self) -> list[dict]:
        rows = []
        for run in index.find_runs(self.root):
            try:
                sealed = bool(self.is_sealed(run))
            except (UserError, OSError, ValueError):
                sealed = True  # a lab folder that cannot be read: withhold rather than spoil
            rows.append(index.run_row(run, self.root, sealed, self.verdict))
        return rows

    def payload(self, rels: list[str]) -> dict:
        runs = [self.run_dir(r) for r in rels]
        if len(set(runs)) != len(runs):
            raise UserError("a run is named twice; give each run once")
        first, others = runs[0], runs[1:]
        sealed = bool(self.is_sealed(first))
        baseline = None
        if not others and not reader.config_of(reader.manifest_of(first)).get("blind"):
            baseline = reader.find_baseline(first)
        return dashboard.build_payload(first, baseline, others, sealed=sealed)

    def steps(self, rels: list[str]) -> dict:
        out = {}
        for rel in rels:
            run = self.run_dir(rel)
            out[rel] = {"last": reader.last_step(run), "live": reader.live_pid(run) is not None}
        return out


def live_page(payload: dict) -> str:
    """The dashboard page of `payload` with the live-update script after the page's own, allowed to fetch
    from this server only."""
    page = dashboard.render_html(payload)
    csp = "default-src 'none';"
    assert csp in page, "the dashboard template's Content-Security-Policy changed; update live_page"
    page = page.replace(csp, csp + " connect-src 'self';", 1)
    script = dashboard.asset(LIVE_SCRIPT)
    assert "</script" not in script.lower()
    return page.replace("</body>", f"<script>\n{script}\n</script>\n</body>", 1)


def error_page(text: str) -> str:
    import html

    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>minitrain serve</title></head>'
            f'<body style="font: 14px system-ui, sans-serif; margin: 24px"><p id="error">{html.escape(text)}</p>'
            f'<p><a href="/">the runs table</a></p></body></html>')


class Handler(BaseHTTPRequestHandler):
    site: Site  # set on the subclass make_server builds
    server_version = "minitrain"

    def log_message(self, fmt, *args):  # quiet: the page is the log
        pass

    def send(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        self.wfile.write(body)

    def send_json(self, obj, status: int = 200) -> None:
        self.send(status, json.dumps(obj, allow_nan=False, separators=(",", ":")).encode(), "application/json")

    def do_GET(self):  # noqa: N802 (http.server's name)
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        runs = query.get("run", [])
        api = url.path.startswith("/api/")
        try:
            if url.path == "/":
                page = index.render_index(f"{self.site.root.name}: minitrain runs", self.site.rows(), None, served=True)
                self.send(200, page.encode(), SERVED_FILES[".html"])
            elif url.path == "/api/runs":
                self.send_json(self.site.rows())
            elif url.path in ("/api/steps", "/api/payload", "/view"):
                if not runs:
                    raise UserError("name a run: ?run=FOLDER (a path under the experiments folder)")
                if url.path == "/api/steps":
                    self.send_json(self.site.steps(runs))
                elif url.path == "/api/payload":
                    self.send(200, dashboard.embed_json(self.site.payload(runs)).encode(), "application/json")
                else:
                    self.send(200, live_page(self.site.payload(runs)).encode(), SERVED_FILES[".html"])
            elif url.path.startswith("/file/"):
                path = self.site.inside(url.path[len("/file/"):])
                ctype = SERVED_FILES.get(path.suffix.lower())
                if ctype is None or not path.is_file():
                    raise UserError(f"{url.path[6:]!r} is not a page or image of a run")
                self.send(200, reader.file_bytes(path), ctype)
            else:
                raise UserError(f"no page {url.path!r} here; the runs table is at /")
        except (UserError, OSError, ValueError) as e:  # a missing, deleted or damaged run: one line
            text = str(e).splitlines()[0] if str(e) else type(e).__name__
            status = HTTPStatus.NOT_FOUND if isinstance(e, UserError) else HTTPStatus.INTERNAL_SERVER_ERROR
            if api:
                self.send_json({"error": text}, status)
            else:
                self.send(status, error_page(text).encode(), SERVED_FILES[".html"])


def make_server(experiments: Path, port: int = 8000, host: str = HOST) -> ThreadingHTTPServer:
    experiments = Path(experiments)
    if not experiments.is_dir():
        raise UserError(f"{experiments} is not a folder; give the folder that holds your run folders")
    handler = type("SiteHandler", (Handler,), {"site": Site(experiments)})
    try:
        server = ThreadingHTTPServer((host, port), handler)
    except OSError as e:
        raise UserError(f"cannot listen on {host}:{port} ({e.strerror}); choose another --port") from None
    server.daemon_threads = True
    return server


def site_root(folder: Path) -> tuple[Path, str, str]:
    """What `serve FOLDER` serves: (the folder, "/", "") for a folder of runs; for a run folder, its parent, the
    run's page and why (a run folder's own subfolders, its checkpoints, are not runs)."""
    folder = Path(folder)
    if not files.is_run_dir(folder):
        return folder, "/", ""
    folder = folder.resolve()
    return (folder.parent, "/view?run=" + quote(folder.name),
            f"{folder.name} is a run folder: serving its parent, {folder.parent}, with this run's page")


def serve(experiments: Path, port: int = 8000, host: str = HOST) -> int:
    """Serve until Ctrl-C; returns 0 after closing the socket."""
    root, start, note = site_root(experiments)
    server = make_server(root, port, host)
    print(f"minitrain serve: {root.resolve()} at http://{host}:{server.server_address[1]}{start} "
          "(Ctrl-C stops it)", file=sys.stderr, flush=True)
    if note:
        print(f"minitrain serve: {note}", file=sys.stderr, flush=True)
    print(f"minitrain serve: lists the {len(index.find_runs(root))} run folders under {root.resolve()}; a run "
          "trained into a folder outside it (--out elsewhere) is not among them: serve that run's folder or "
          "its parent", file=sys.stderr, flush=True)
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        print("minitrain serve: stopped", file=sys.stderr)
    finally:
        server.server_close()
    return 0
