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

Safety: it binds 127.0.0.1 unless told otherwise (another address is said aloud: every machine that reaches
it reads the runs); it answers only requests whose Host is this machine's loopback name (or the --host
given), so a web page whose name rebinds to 127.0.0.1 reads nothing; a run or file is looked up under
EXPERIMENTS after resolving it (so "..", "%2e%2e" and a symlink that leads out are all refused with 404);
/file/ serves only the pages minitrain writes (a run's dashboard.html, a sweep's index.html) and the few
inert file kinds in SERVED_FILES, each with a sandboxing Content-Security-Policy, so a page someone else
put in a run folder never runs as this server's origin. Sealed runs: run/sealing.py's rule
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
LOOPBACK = ("127.0.0.1", "localhost", "[::1]")  # the Host names a request may carry (with this server's port)
WILDCARDS = ("", "0.0.0.0", "::")
PORTS = range(65536)  # 0: any free port  # --host values that bind every interface
SERVED_FILES = {".html": "text/html; charset=utf-8", ".png": "image/png", ".csv": "text/csv; charset=utf-8",
                ".md": "text/plain; charset=utf-8"}
# the pages minitrain writes that /file/ serves: a run's dashboard, a sweep's page (beside its data file)
SERVED_PAGES = {"dashboard.html": files.is_run_dir,
                "index.html": lambda d: (d / index.SWEEP_MARK).is_file() or (d / "sweep.json").is_file()}
# every /file/ answer: no script runs as this origin (sandbox: an opaque origin), nothing fetched
FILE_CSP = ("sandbox allow-scripts allow-popups allow-top-navigation-by-user-activation; default-src 'none'; "
            "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:")
LIVE_SCRIPT = "live.js"


def holds(path: Path, test) -> bool:
    """test(path), False where the path cannot even be looked at (a name too long for the file system)."""
    try:
        return bool(test(path))
    except OSError:
        return False


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
        if not holds(path, lambda p: p.is_dir() and files.is_run_dir(p)):
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

    def send(self, status: int, body: bytes, ctype: str, csp: str | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        if csp:
            self.send_header("Content-Security-Policy", csp)
        self.end_headers()
        self.wfile.write(body)

    def host_allowed(self) -> bool:
        """Is the request's Host this machine's loopback name (or the --host given) with this server's port?
        Anything else is a name that merely resolves here (DNS rebinding), refused."""
        host = (self.headers.get("Host") or "").strip().lower()
        port = str(self.server.server_address[1])
        names = set(LOOPBACK) | ({self.server.named_host.lower()} if self.server.named_host not in WILDCARDS else set())
        return any(host in (name, f"{name}:{port}") for name in names)

    def handle_one_request(self):
        # a client gone mid-answer (a browser aborts its polls on every navigation) is nothing to report
        try:
            super().handle_one_request()
        except (ConnectionError, TimeoutError):
            self.close_connection = True

    def refuse(self, status: int, text: str) -> None:
        self.send(status, error_page(text).encode(), SERVED_FILES[".html"])

    def do_POST(self):  # noqa: N802 - every method but GET: the site is read-only
        self.refuse(HTTPStatus.METHOD_NOT_ALLOWED, "this server only answers GET")

    do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_POST

    def send_json(self, obj, status: int = 200) -> None:
        self.send(status, json.dumps(obj, allow_nan=False, separators=(",", ":")).encode(), "application/json")

    def do_GET(self):  # noqa: N802 (http.server's name)
        if not self.host_allowed():
            return self.refuse(HTTPStatus.MISDIRECTED_REQUEST, "this server answers only requests to 127.0.0.1, "
                               "localhost or [::1]")
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
                page = SERVED_PAGES.get(path.name)
                if ctype is None or not holds(path, Path.is_file) or \
                        (ctype == SERVED_FILES[".html"] and not (page and holds(path.parent, page))):
                    raise UserError(f"{url.path[6:]!r} is not a page or image of a run")
                self.send(200, reader.file_bytes(path), ctype, FILE_CSP)
            else:
                raise UserError(f"no page {url.path!r} here; the runs table is at /")
        except ConnectionError:
            raise  # the client has gone: nobody to tell (handle_one_request)
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
    if int(port) not in PORTS:
        raise UserError(f"--port {port}: give a port from 1 to 65535 (0: any free port)")
    if not str(host).strip():
        raise UserError("--host is empty (which would listen on every interface); give an address, e.g. 127.0.0.1")
    handler = type("SiteHandler", (Handler,), {"site": Site(experiments)})
    try:
        server = ThreadingHTTPServer((host, port), handler)
    except (OSError, OverflowError) as e:
        why = getattr(e, "strerror", None) or str(e)
        raise UserError(f"cannot listen on {host}:{port} ({why}); choose another --host or --port") from None
    server.daemon_threads = True
    server.named_host = str(host)
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
    if host not in ("127.0.0.1", "localhost", "::1"):
        print(f"minitrain serve: warning: listening on {host}, not on this machine alone: every machine that "
              "reaches this address can read these runs", file=sys.stderr, flush=True)
    shown = f"[{host}]" if ":" in host else host
    print(f"minitrain serve: {root.resolve()} at http://{shown}:{server.server_address[1]}{start} "
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
