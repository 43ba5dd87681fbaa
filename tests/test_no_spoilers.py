"""Nothing a learner can see before the reveal gives an answer away.

After a small lab (the baseline and 19-injection-A/B/C, as `minitrain lab` leaves them) and a blind lab, a
learner runs every command that reads a run and opens every page. This test lists all of it: every file under
experiments/ and learners/, the DOM text of every page rendered in Chromium, and every command's output. None
may hold a leaf id or title of the stability check that the lab's runs lead to, a cause name, or a number of
their signatures (expected vs observed). The spike lab names its injections by design (B is "bad_batch"); a
blind lab names none of them."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from conftest import LAB_LETTERS, SMALL_K, run_cli, small_args
from minitrain.analysis import signature, stability
from minitrain.core.fmt import fmt
from minitrain.lab import learner, parallel

SPIKE_RUNS = [f"19-injection-{letter}-k{SMALL_K}" for letter in "ABC"]
BLIND_RUNS = ["19-blind/01", "19-blind/02", "19-blind/03"]
# what a signature derives against the baseline; raw readings are on the panels by design (the grad norm at
# K, and so the pre/post-clip ratio, which equals it with grad_clip 1.0)
DERIVED = ("grad_norm_ratio_vs_baseline_at_k", "v_ratio_at_k", "max_excess", "excess_at_k_window", "recovery_steps")


@pytest.fixture(scope="module")
def seen(small_lab, small_blind_lab, tmp_path_factory):
    """{where: text} for everything a learner can see before the reveal, and the experiments folder."""
    root = tmp_path_factory.mktemp("learner")
    exp = root / "experiments"
    shutil.copytree(small_lab / "18-baseline", exp / "18-baseline")
    for letter, run in zip("ABC", SPIKE_RUNS):  # the names `minitrain lab --injection-step 60` gives them
        shutil.copytree(small_lab / f"19-injection-{letter}", exp / run)
    shutil.copytree(small_blind_lab / "19-blind", exp / "19-blind")
    out: dict[str, str] = {}

    def cli(*args):
        proc = run_cli(*map(str, args), cwd=root)
        out["$ minitrain " + " ".join(map(str, args))] = proc.stdout + proc.stderr
        return proc

    with pytest.MonkeyPatch.context() as mp:  # the runs are there: what `minitrain lab` says once they end
        mp.setattr(parallel, "run_lab", lambda experiments, *a, **k: [f"{r}: finished 120 steps" for r in SPIKE_RUNS])
        assert cli("lab", "--experiments", exp, "--injection-step", SMALL_K, *small_args()).returncode == 0
    assert cli("blind-runs", "spike", "--experiments", exp, *small_args()).returncode == 0
    cli("learner", "init", "ana")
    for run in SPIKE_RUNS + BLIND_RUNS:
        cli("dashboard", exp / run)
        for command in (["diagnose"], ["postmortem"], ["signature"], ["export", "--tensorboard", root / "tb"]):
            proc = cli(command[0], exp / run, *command[1:])
            assert proc.returncode == 2 and "not revealed yet" in proc.stderr, (command, proc.stderr)
    cli("report", exp)
    cli("index", exp)
    for lab in ("spike", "blind"):
        cli("grade", "ana", "--lab", lab, "--experiments", exp)
    cli("check", "ana", "--lab", "blind", "--experiments", exp)
    for path in sorted(p for p in root.rglob("*") if p.is_file() and ".sealed" not in p.parts):  # the secret itself
        out[f"file name {path.relative_to(root)}"] = str(path.relative_to(root))
        if path.suffix in (".md", ".json", ".jsonl", ".yaml", ".html", ".txt") and path.name != "metrics.jsonl":
            out[f"file {path.relative_to(root)}"] = path.read_text(errors="replace")
    return out, exp


def forbidden(exp: Path) -> tuple[dict[str, str], dict[str, str]]:
    """({text: why} never to be seen, {number: why} never to be seen in words): the leaf ids and titles of
    the lab's references and of the walker's verdict on each run, the causes, and each signature's numbers."""
    words = {}
    for lab in ("spike", "blind"):
        _, refs = learner.read_reference(learner.LABS[lab])
        for ref in refs.values():
            leaf = stability.ITEMS[ref.leaf]
            words.update({ref.leaf: f"leaf of {ref.fault}", leaf.title: f"title of {ref.leaf}",
                          ref.cause: f"cause of {ref.fault}"})
    for run in SPIKE_RUNS + BLIND_RUNS:
        v = stability.diagnose_run(exp / run)
        words.update({v["leaf"]: f"the walker's leaf on {run}", v["title"]: f"the walker's title on {run}"})
        if v["cause"] not in ("healthy", "unknown"):
            words[v["cause"]] = f"the walker's cause on {run}"
    words.pop("bad_batch")  # B's injection name in the spike lab (checked apart for the blind lab)
    numbers = {}
    for run in SPIKE_RUNS:
        sig = signature.lab_signature(exp / run, exp / "18-baseline")
        for key in DERIVED:
            text = fmt(sig.get(key))
            if sig.get(key) is not None and len(text.strip("-0.")) >= 3:  # short ones would match anything
                numbers[text] = f"{key} of {run}"
    return words, numbers


def data_of(html: str) -> str:
    """A page's embedded data (the page's script is the same for every run)."""
    return html.split('id="dashboard-data">', 1)[-1].split("</script>", 1)[0] if "dashboard-data" in html else html


def test_nothing_seen_before_the_reveal_names_an_answer(seen, browser):  # noqa: F811
    out, exp = seen
    words, numbers = forbidden(exp)
    page = browser.new_page()
    for path in sorted(exp.rglob("*.html")):  # what each page shows, rendered, and everything in its DOM
        page.goto(path.as_uri(), wait_until="load")
        out[f"page {path.relative_to(exp)} (rendered text)"] = page.inner_text("body")
        out[f"page {path.relative_to(exp)} (DOM text)"] = page.evaluate("document.documentElement.textContent")
    page.close()
    assert any("(rendered text)" in where for where in out) and len(out) > 50
    leaks = [(where, word, why) for where, text in out.items() for word, why in words.items() if word in text]
    assert not leaks, leaks[:10]
    # in words: what commands print and pages show (files and a page's embedded data hold raw metrics)
    shown = {where: text for where, text in out.items() if where.startswith("$") or where.endswith("(rendered text)")}
    leaks = [(where, n, why) for where, text in shown.items() for n, why in numbers.items() if n in text]
    assert not leaks, leaks[:10]
    # the blind lab names none of its faults, in its files, its pages or its index rows
    faults = re.compile(r"(?<!\w)(?:scale|bad_batch|v_corrupt|optimizer_state\w*|gradient_explosion)(?!\w)")
    blind = {where: data_of(text) if where.endswith(".html") else text for where, text in out.items()
             if "19-blind" in where and not where.endswith("(DOM text)")}  # the inlined uPlot says "scale"
    assert blind and not [(w, faults.search(text)[0]) for w, text in blind.items() if faults.search(text)]
    index = (exp / "index.html").read_text()
    assert all("sealed" in row for row in index.split("<tr")[1:] if "19-blind/" in row or "19-injection" in row)
    # none of what the reveal writes exists yet, and the lab ended with where the runs are and what to do next
    assert not list(exp.rglob("signature.json")) and not (exp / "lab-report.md").exists()
    lab_said = next(text for where, text in out.items() if where.startswith("$ minitrain lab "))
    assert "next:" in lab_said and "minitrain reveal NAME" in lab_said and "expected vs observed" not in lab_said


def test_a_blind_runs_postmortem_before_the_reveal_names_no_leaf(seen):
    out, exp = seen
    said = [text for where, text in out.items() if where.startswith("$ minitrain postmortem") and "19-blind" in where]
    assert len(said) == 3 and all("not revealed yet" in text and "§" not in text.split("stability-check.md")[0]
                                  for text in said)
    assert not list((exp / "19-blind").rglob("postmortem.md"))


def test_the_pages_of_a_sealed_run_carry_no_answers_at_all(seen):
    _, exp = seen
    for run in SPIKE_RUNS + BLIND_RUNS:
        data = json.loads(data_of((exp / run / "dashboard.html").read_text()))
        assert data["sealed"] and set(data["checks"] or {"signals": 0}) == {"signals"} and data["diagnosis"] is None
        assert all(item["verdict"] == "info" for item in data["health"]
                   if item["label"] in ("step-0 loss", "first-step grad norm", "non-finite values", "learning rate"))
    assert LAB_LETTERS  # the spike runs are the lab's A, B, C
