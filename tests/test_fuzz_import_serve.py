"""`minitrain import` and `minitrain serve` fuzzed with Hypothesis (issue 37).

import: CSV, JSONL and TensorBoard histories built from generated cells (finite numbers, every spelling of a
non-finite one, empty cells, text, NUL), step sequences (gaps, negatives, unordered, fractional, huge),
encodings (a byte-order mark, bytes that are no UTF-8) and sizes. Each must end in one line (a UserError:
exit 2 at the command) or in a run whose rows are exactly the source's steps that logged a loss, each
value the source's (None where non-finite) or, where the source did not log it at that step, its last
earlier value, with every carried-forward or dropped value counted in the manifest's `imported` record.

serve: requests with generated Host headers, paths, methods and sizes. Each is answered with a status line
(421 for a foreign Host, 4xx for what is not a page, 501 for an unknown method), never a traceback, and the
server keeps answering.

Examples per test: EXAMPLES, derandomized (the same ones every run), so the suite stays fast;
MINITRAIN_FUZZ=long runs LONG_EXAMPLES fresh random ones.
"""
from __future__ import annotations

import json
import math
import os
import socket
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minitrain.core.errors import UserError
from minitrain.run import importer, reader
from minitrain.run.nonfinite import non_finite_in

LONG = os.environ.get("MINITRAIN_FUZZ") == "long"
EXAMPLES = {"table": 150, "tensorboard": 25, "serve": 150}
LONG_EXAMPLES = {"table": 2000, "tensorboard": 200, "serve": 3000}
SIGNALS = ("loss", "lr", "grad_norm")


def fuzz(kind: str) -> settings:
    return settings(max_examples=(LONG_EXAMPLES if LONG else EXAMPLES)[kind], deadline=None, derandomize=not LONG,
                    database=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                                          HealthCheck.data_too_large])


NON_FINITE = ("nan", "-nan", "NaN", "inf", "-inf", "+inf", "Infinity", "-Infinity", "1e999")
cells = st.one_of(st.floats(allow_nan=False, allow_infinity=False, width=32).map(repr), st.sampled_from(NON_FINITE),
                  st.just(""), st.sampled_from(["=A1*2", "n/a", "0.5\0", "1,5", "#DIV/0!"]))
steps = st.one_of(st.integers(-3, 10**6), st.sampled_from([0.5, 1e300, 2**53 + 2, -0.0, "1e3", "x"]))


def expected(source_rows: list[tuple]) -> dict | None:
    """What the import must give for these (step, loss, lr, grad_norm) rows, or None when it must refuse:
    {step: {signal: value}} of the steps that logged a loss, and the carried-forward counts."""
    logged: dict[str, dict[int, float | None]] = {s: {} for s in SIGNALS}
    for row in source_rows:
        step = row[0]
        try:
            v = float(step)
        except (TypeError, ValueError):
            return None
        if not math.isfinite(v) or v != int(v) or abs(v) > reader.MAX_STEP:
            return None
        for signal, cell in zip(SIGNALS, row[1:]):
            if cell == "":
                continue
            try:
                value = float(cell)
            except ValueError:
                return None  # text (or a NUL) in a signal column
            if "\0" in cell:
                return None
            logged[signal][int(v)] = value if math.isfinite(value) else None
    if not any(s >= 0 for s in logged["loss"]):  # only a loss is required; a signal never logged is absent
        return None
    rows, carried = {}, {}
    for step in sorted(s for s in logged["loss"] if s >= 0):
        row = {}
        for signal in SIGNALS:
            col = logged[signal]
            if not col:  # never logged: absent from every row, nothing carried
                row[signal] = None
                continue
            if step in col:
                row[signal] = col[step]
            else:
                before = [s for s in col if s < step]
                row[signal] = col[max(before)] if before else col[min(col)]
                carried[signal] = carried.get(signal, 0) + 1
        rows[step] = row
    return {"rows": rows, "carried": carried}


def check(source, out, want: dict | None) -> None:
    try:
        importer.import_run(source, out)
    except UserError as e:
        assert "\n" not in str(e) and str(e), repr(str(e))
        assert want is None, f"refused ({e}) what should import"
        assert not (out / reader.METRICS).exists()
        return
    assert want is not None, "imported what should be refused"
    got = [json.loads(x) for x in (out / reader.METRICS).read_text().splitlines()]
    assert [r["step"] for r in got] == list(want["rows"]), "the rows are not the source's steps with a loss"
    for r in got:
        for signal in SIGNALS:
            w, g = want["rows"][r["step"]][signal], r.get(signal)
            assert (g is None) == (w is None) and (w is None or math.isclose(g, w, rel_tol=1e-6)), (r, signal, w)
    manifest = json.loads((out / reader.MANIFEST).read_text())
    assert manifest["imported"]["carried_forward"] == want["carried"]
    non_finite = any(non_finite_in(r) for r in got)  # the one rule (an absent grad norm is not measured)
    assert manifest["status"] == ("non_finite" if non_finite else "finished")


source_rows = st.lists(st.tuples(steps, cells, cells, cells), min_size=0, max_size=40, unique_by=lambda r: str(r[0]))


@fuzz("table")
@given(rows=source_rows, bom=st.booleans(), jsonl=st.booleans(), junk=st.sampled_from([b"", b"\xff\xfe", b"\x00"]))
def test_an_import_of_a_generated_history_is_its_rows_or_one_line(tmp_path_factory, rows, bom, jsonl, junk):
    tmp = tmp_path_factory.mktemp("h")
    # the same step twice would be a point a later one replaced: noted, and not what this test checks
    rows = list({str(float(r[0])) if not isinstance(r[0], str) else r[0]: r for r in rows}.values())
    if jsonl:
        lines = []
        for r in rows:
            rec = {"step": r[0] if not isinstance(r[0], str) else r[0]}
            rec.update({s: c for s, c in zip(SIGNALS, r[1:]) if c != ""})
            lines.append(json.dumps(rec))
        source = tmp / "h.jsonl"
        data = "\n".join(lines).encode()
    else:
        source = tmp / "h.csv"
        data = "\n".join(["step,loss,lr,grad_norm", *(",".join(f'"{c}"' if "," in str(c) else str(c) for c in r)
                                                       for r in rows)]).encode()
    source.write_bytes((b"\xef\xbb\xbf" if bom else b"") + data + (junk if rows else b""))
    # bytes that are no UTF-8, or a NUL, at the end of the last line: damage, refused
    check(source, tmp / "out", None if junk and rows else expected(rows))


@fuzz("tensorboard")
@given(points=st.lists(st.tuples(st.integers(0, 10**6), st.floats(allow_nan=True, allow_infinity=True, width=32),
                                 st.booleans()), min_size=1, max_size=30, unique_by=lambda p: p[0]),
       cut=st.one_of(st.none(), st.integers(1, 400)))
def test_an_import_of_generated_events_is_its_points_or_one_line(tmp_path_factory, points, cut):
    pytest.importorskip("tensorboard")
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
    from tensorboard.compat.proto import event_pb2, summary_pb2

    tmp = tmp_path_factory.mktemp("tb")
    writer = EventFileWriter(str(tmp / "logs"))
    for step, value, lr_logged in points:
        tags = {"train/loss": value, "grad_norm": 1.0, **({"lr": 1e-3} if lr_logged else {})}
        writer.add_event(event_pb2.Event(step=step, summary=summary_pb2.Summary(
            value=[summary_pb2.Summary.Value(tag=t, simple_value=v) for t, v in tags.items()])))
    writer.close()
    (events,) = (tmp / "logs").glob("events.out.tfevents*")
    whole = events.read_bytes()
    if cut is not None and cut < len(whole):
        events.write_bytes(whole[:len(whole) - cut])
        try:
            importer.import_run(tmp / "logs", tmp / "out")
        except UserError as e:
            assert "\n" not in str(e)
        else:  # cut exactly at a record's end: a shorter log, which nothing can tell apart
            assert len(reader.read_metrics(tmp / "out" / reader.METRICS)[0]) <= len(points)
        return
    rows = [(step, repr(value) if math.isfinite(value) else "nan", "0.001" if lr else "", "1.0")
            for step, value, lr in points]
    want = expected(rows)
    if want is not None:  # TensorBoard keeps float32: compare with what it stored
        import numpy as np

        for step, value, _ in points:
            if step in want["rows"] and math.isfinite(value):
                want["rows"][step]["loss"] = float(np.float32(value))
    check(tmp / "logs", tmp / "out", want)


# --- serve --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from minitrain.views import serve

    exp = tmp_path_factory.mktemp("served")
    (exp / "h.csv").write_text("step,loss,lr,grad_norm\n" + "".join(f"{s},{3 - s / 100},0.001,0.5\n" for s in range(20)))
    importer.import_run(exp / "h.csv", exp / "run")
    server = serve.make_server(exp, port=0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def status_of(port: int, request: bytes) -> int:
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(request)  # all of it read by the server (headers only): its close sends no reset
        head = b""
        while b"\r\n" not in head:
            chunk = s.recv(4096)
            if not chunk:
                break
            head += chunk
    assert head.startswith(b"HTTP/1."), head[:200]
    return int(head.split()[1])


token = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=12)
paths = st.one_of(st.sampled_from(["/", "/api/runs", "/api/steps?run=run", "/api/payload?run=run", "/view?run=run",
                                   "/file/run/dashboard.html", "/file/run/metrics.jsonl", "/file/../h.csv",
                                   "/file/%2e%2e/h.csv", "/view?run=%ff", "/api/steps?run=" + "a" * 5000]),
                  st.builds(lambda p: "/" + p, token), st.builds(lambda n: "/" + "x" * n, st.integers(0, 70000)))


@fuzz("serve")
@given(method=st.one_of(st.sampled_from(["GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS"]), token),
       path=paths, host=st.one_of(st.sampled_from(["127.0.0.1:{port}", "localhost:{port}", "[::1]:{port}", "evil.example",
                                                   "127.0.0.1", "", "127.0.0.1:{port}.evil"]), token),
       body=st.integers(0, 60000))
def test_every_generated_request_is_answered_with_a_status(served, method, path, host, body):
    port = served.server_address[1]
    host = host.replace("{port}", str(port))
    # the size is a header's (a body the server never reads would make its close a reset, losing its answer)
    request = f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nX-Pad: {'x' * body}\r\nConnection: close\r\n\r\n".encode()
    code = status_of(port, request)
    local = host in {f"{name}{p}" for name in ("127.0.0.1", "localhost", "[::1]") for p in ("", f":{port}")}
    if method == "GET" and len(path) < 65000:
        assert code in ((200, 404) if local else (421,)), (method, path[:80], host, code)
    else:
        assert code in (400, 405, 414, 421, 501) or (code == 200 and method == "GET"), (method, path[:80], host, code)
    assert status_of(port, f"GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()) == 200
