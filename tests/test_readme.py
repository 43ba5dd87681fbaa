"""Every command the README tells a reader to run works as written in a new shell (no venv activated), the
learner's workflow is given in one order, and the learner's templates give real leaves as examples.

A command is a line of a ```bash block, or an inline `code` span of the prose that starts with a command word
(`./dev`, `just`, `minitrain`, `python`, `pip`, `torchrun`, `.ci/run`, `source`), after any `VAR=value`
assignments. The Commands table lists command names for reference and is not read. `./dev` itself is run once
for real, in a copy of the repository's entry points with a clean PATH (no install: its stamp is current).
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

from minitrain.analysis.tree import ITEMS, Leaf
from minitrain.cli import COMMANDS
from minitrain.lab.learner import workspace
from minitrain.lab.learner.labs import LABS

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
COMMAND_WORDS = ("./dev", "just", "minitrain", "python", "python3", "pip", "torchrun", ".ci/run", "source")
JUST = ROOT / ".venv" / "bin" / "just"


def recipes() -> set[str]:
    out = subprocess.run([str(JUST), "--justfile", str(ROOT / "justfile"), "--summary"], capture_output=True,
                         text=True, check=True).stdout
    return set(out.split())


def words(command: str) -> list[str]:
    """The command's words without leading VAR=value assignments and without a trailing comment."""
    w = shlex.split(command, comments=True)
    while w and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", w[0]):
        w = w[1:]
    return w


def readme_commands() -> list[tuple[str, bool]]:
    """(command, venv active): every bash-block line and every inline command span, in README order."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", README, re.S):
        active = False
        for line in block.splitlines():
            if not line.strip():
                continue
            out.append((line.strip(), active))
            active = active or words(line)[:2] == ["source", ".venv/bin/activate"]
    prose = re.sub(r"```.*?```", "", README, flags=re.S)
    prose = "\n".join(line for line in prose.splitlines() if not line.startswith("|"))  # the reference table
    for span in re.findall(r"`([^`\n]+)`", prose):
        w = words(span) if not span.startswith("-") else []
        if len(w) > 1 and w[0] in COMMAND_WORDS:  # one word (`just`, `minitrain`) names a tool
            out.append((span, False))
    return out


def placeholder(word: str) -> bool:
    """RECIPE, COMMAND, ...: a pattern's slot, not a name to look up."""
    return word == "..." or (word.isupper() and word.isalpha())


def why_it_fails(command: str, active: bool, names: set[str], subcommands: set[str]) -> str | None:
    w = [x for x in words(command) if not placeholder(x)]
    head, rest = w[0], w[1:]
    if head == "source":
        return None if rest == [".venv/bin/activate"] else "sources something other than the venv"
    if head == ".ci/run":
        return None if (ROOT / ".ci" / "run").exists() else ".ci/run is missing"
    if head == "./dev" or (head == "just" and active):
        args = [a for a in rest if not a.startswith("-")]
        if not args:
            return None if rest in (["--list"], [], ["--setup-only"], ["--test-tools"]) else f"unknown ./dev option {rest}"
        if args[0] == "minitrain":
            sub = [a for a in args[1:] if not a.startswith("-")]
            return None if not sub or sub[0] in subcommands else f"minitrain has no command {sub[0]}"
        return None if args[0] in names else f"the justfile has no recipe {args[0]}"
    if head == "minitrain" and active:
        return None if not rest or rest[0] in subcommands else f"minitrain has no command {rest[0]}"
    if head.startswith(".venv/bin/"):
        return None
    return f"'{head}' is not on the PATH of a new shell (write ./dev ...)"


def test_every_readme_command_works_in_a_new_shell():
    names, subcommands = recipes(), {c.name for c in COMMANDS}
    cmds = readme_commands()
    assert len(cmds) > 30 and any(c.startswith("./dev learner ana") for c, _ in cmds)
    bad = [(c, why) for c, active in cmds if (why := why_it_fails(c, active, names, subcommands))]
    assert bad == [], bad


def test_dev_puts_the_venv_first_in_a_clean_shell(tmp_path):
    """./dev, run for real from a new login shell whose PATH has no venv: `./dev minitrain ...` and a recipe."""
    for name in ("dev", "justfile", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    venv_bin = tmp_path / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    for tool in ("python", "just", "minitrain"):
        (venv_bin / tool).symlink_to(ROOT / ".venv" / "bin" / tool)
    stamp = subprocess.run(["sha256sum", "pyproject.toml"], cwd=tmp_path, capture_output=True, text=True).stdout[:16]
    (tmp_path / ".venv" / ".minitrain-installed").write_text(stamp + "\n")  # current: ./dev installs nothing
    env = {"HOME": os.environ.get("HOME", "/root"), "PATH": "/usr/bin:/bin"}
    r = subprocess.run(["bash", "-lc", "command -v minitrain just; ./dev minitrain config && ./dev --list"],
                       cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "seed: 42" in r.stdout and "learner name" in r.stdout, r.stdout
    assert str(venv_bin) not in r.stdout.split("seed:")[0]  # the new shell itself has neither on its PATH


def test_the_learner_workflow_is_one_order():
    """The numbered steps train first, then create the learner's folder; no other passage says otherwise."""
    steps = re.findall(r"^(\d)\. `([^`]+)`", README.split("## The learner's workflow", 1)[1], re.M)
    order = [cmd for _, cmd in steps]
    assert order[:2] == ["./dev lab", "./dev learner ana"], order
    assert [int(n) for n, _ in steps] == sorted(int(n) for n, _ in steps)
    assert README.index("./dev lab") < README.index("./dev learner ana")  # Start here agrees


def example_nodes(text: str) -> list[str]:
    return re.findall(r"e\.g\. (§\d+\.[A-Z0-9]+)", text)


def test_templates_give_leaves_as_examples(tmp_path):
    """Where a template shows an example node (the node is where the learner stopped: a leaf), it is a leaf of
    the tree (analysis/tree.py), and not the answer of one of the lab's runs."""
    texts = [p.read_text() for p in (ROOT / "theory").glob("*template*")]
    texts += [workspace.diagnoses_template("ana", lab) for lab in LABS.values()]
    found = [n for t in texts for n in example_nodes(t)]
    assert found, "no example node in the templates"
    for node in found:
        assert isinstance(ITEMS.get(node), Leaf), f"{node} is not a leaf of the tree"
        assert ITEMS[node].cause in ("healthy",), f"{node} names a fault the lab asks for"


def test_reveal_prints_the_pages_and_opens_them_only_where_a_browser_can(tmp_path, monkeypatch):
    from minitrain.lab import browser

    assert not browser.can_open_browser({"PYTEST_CURRENT_TEST": "x", "DISPLAY": ":0"}, "linux")
    assert not browser.can_open_browser({"CI": "true"}, "darwin")
    assert not browser.can_open_browser({}, "linux")  # a server: no display
    assert browser.can_open_browser({"WAYLAND_DISPLAY": "wayland-0"}, "linux")
    assert browser.can_open_browser({}, "darwin")
    pages = browser.revealed_pages(tmp_path, LABS["spike"].runs)
    for page in pages[:2]:
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text("<html></html>")
    opened = []
    monkeypatch.setattr(browser.webbrowser, "open_new_tab", opened.append)
    lines = browser.show_pages(pages)  # under pytest: printed, never opened
    assert opened == [] and "open them in a browser" in lines[0] and len(lines) == 3
    assert str(pages[0].resolve()) in lines[1] and pages[1].resolve().as_uri() in lines[2]
    browser.show_pages(pages, open_them=True)
    assert opened == [p.resolve().as_uri() for p in pages[:2]]


def test_every_recipe_lists_its_whole_description():
    """just lists a recipe's last comment line only: a recipe described on several lines says it in one [doc]."""
    lines = (ROOT / "justfile").read_text().splitlines()
    cut = []
    for i, line in enumerate(lines):
        if not re.match(r"^[a-z][\w-]*( [^:=]*)?:( |$)", line) or line.startswith("set "):
            continue
        j, comments = i - 1, 0
        while j >= 0 and lines[j].startswith(("#", "[")):
            comments += lines[j].startswith("#")
            j -= 1
        if comments > 1 and not any(lines[k].startswith("[doc(") for k in range(j + 1, i)):
            cut.append(line)
    assert cut == [], cut


def test_a_refusal_through_dev_is_one_line_not_a_crash_and_its_hint_works_in_a_new_shell(tmp_path):
    """As ./dev runs a recipe (the venv first on the PATH, MINITRAIN_VIA set): no "error: Recipe ... failed" after
    minitrain's one line, whose hint is written as the README writes commands."""
    env = {**os.environ, "PATH": f"{ROOT / '.venv' / 'bin'}:{os.environ['PATH']}", "MINITRAIN_VIA": "./dev"}
    r = subprocess.run(["just", "-f", str(ROOT / "justfile"), "check", "nobody-here"], cwd=tmp_path,
                       capture_output=True, text=True, env=env)
    assert r.returncode == 2 and "error: Recipe" not in r.stderr, r.stderr
    last = r.stderr.splitlines()[-1]
    assert last.startswith("minitrain: error: no learner folder"), r.stderr
    assert "'./dev minitrain learner init nobody-here'" in last and "'./dev learner nobody-here'" in last, last


def test_hints_are_rewritten_only_under_dev(monkeypatch):
    from minitrain.core import hints

    text = "run 'minitrain reveal ana' or `just lab`; minitrain serve: stopped"
    monkeypatch.delenv(hints.VIA, raising=False)
    assert hints.as_typed(text) == text
    monkeypatch.setenv(hints.VIA, "./dev")
    assert hints.as_typed(text) == "run './dev minitrain reveal ana' or `./dev lab`; minitrain serve: stopped"
