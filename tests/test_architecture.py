"""The package's layers (docs/architecture.md): imports only go down, no private name crosses a module, no cycle.

Every import counts, the ones inside functions too: they are read from the syntax tree of each module."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "src" / "minitrain"
# lowest first; a module may import from its own layer and the layers before it
LAYERS = ("core", "run", "loop", "analysis", "views", "lab", "cli")


def module_name(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> int:
    parts = module.split(".")
    if parts == ["minitrain"]:  # __version__ and SCHEMA_VERSION: below everything
        return -1
    top = parts[1]
    if top == "__main__":
        return LAYERS.index("cli")
    if top in ("probe", "trainer"):  # the loop's instruments on a foreign loop; the run folder's life around
        return LAYERS.index("loop")  # the loop (fresh, resumed, forked): the loop's layer
    return LAYERS.index(top)


def imports(path: Path) -> list[tuple[int, str, list[str]]]:
    """(line, imported module, imported names) for every minitrain import in a file."""
    return imports_in(path.read_text(), module_name(path), path.name == "__init__.py")


def imports_in(source: str, here: str, is_package: bool = False) -> list[tuple[int, str, list[str]]]:
    tree = ast.parse(source)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, []) for a in node.names if a.name.split(".")[0] == "minitrain"]
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:  # relative imports resolve against this module's package
                base = here.split(".")[: len(here.split(".")) - node.level + (1 if is_package else 0)]
                mod = ".".join([*base, mod] if mod else base)
            if mod.split(".")[0] != "minitrain":
                continue
            names = [a.name for a in node.names]
            # `from minitrain.run import files` imports the module minitrain.run.files
            subs = [n for n in names if (PKG.parent / mod.replace(".", "/") / f"{n}.py").exists()
                    or (PKG.parent / mod.replace(".", "/") / n).is_dir()]
            out += [(node.lineno, f"{mod}.{n}", []) for n in subs]
            rest = [n for n in names if n not in subs]
            if rest:
                out.append((node.lineno, mod, rest))
    return out


MODULES = sorted(p for p in PKG.rglob("*.py"))


def test_every_module_sits_in_a_layer():
    for path in MODULES:
        layer_of(module_name(path))  # raises ValueError for a folder that is not a layer


# One job per room (docs/architecture.md, "Rooms and their size"): no module needs more than this many lines
MAX_LINES = 600


def test_no_room_grows_past_600_lines():
    lines = {str(p.relative_to(PKG)): len(p.read_text().splitlines()) for p in MODULES}
    assert not {m: n for m, n in lines.items() if n > MAX_LINES}, "split these modules, one job each"
    assert "Rooms and their size" in (PKG.parents[1] / "docs" / "architecture.md").read_text()


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PKG)))
def test_imports_only_go_down(path):
    here = module_name(path)
    bad = [f"line {line}: {mod}" for line, mod, _ in imports(path) if layer_of(mod) > layer_of(here)]
    assert not bad, f"{here} ({LAYERS[layer_of(here)]}) imports from a layer above it: {bad}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PKG)))
def test_no_private_name_crosses_a_module(path):
    bad = [f"line {line}: {mod}.{n}" for line, mod, names in imports(path) for n in names
           if n.startswith("_") and not n.startswith("__")]
    assert not bad, f"{module_name(path)} imports private names: {bad}"


def test_no_import_cycle():
    graph = {module_name(p): {m for _, m, _ in imports(p) if m != module_name(p)} for p in MODULES}
    known = set(graph)
    graph = {m: {d for d in deps if d in known} for m, deps in graph.items()}
    state: dict[str, int] = {}  # 1 visiting, 2 done

    def visit(m, stack):
        state[m] = 1
        for d in graph[m]:
            if state.get(d) == 1:
                raise AssertionError("import cycle: " + " -> ".join([*stack[stack.index(d):], d]))
            if d not in state:
                visit(d, [*stack, d])
        state[m] = 2

    for m in graph:
        if m not in state:
            visit(m, [m])


def runs_the_cli(source: str, commands: set[str]) -> list[str]:
    """Where a module runs a command line instead of calling a function: it hands an entry point down (a call
    with a keyword `main=` other than None, the CLI's `main` for the runner to fork running it), builds a
    command's argv (a list or tuple literal: a command's name, then an option) or starts `python -m minitrain`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and any(k.arg == "main" and not (isinstance(k.value, ast.Constant)
                                                                       and k.value.value is None)
                                              for k in node.keywords):
            found.append(f"line {node.lineno}: {ast.unparse(node.func)}(main=...)")
        elif isinstance(node, (ast.List, ast.Tuple)):
            words = [e.value if isinstance(e, ast.Constant) else None for e in node.elts] or [None]
            option = len(words) > 1 and isinstance(words[1], str) and words[1].startswith("--")
            if (words[0] in commands and option) or any(
                    words[i:i + 2] == ["-m", "minitrain"] for i in range(len(words))):
                found.append(f"line {node.lineno}: {ast.unparse(node)[:60]}")
    return found


def test_nothing_below_the_cli_runs_a_command_line():
    from minitrain.cli import COMMANDS

    commands = {c.name for c in COMMANDS}
    below = [p for p in MODULES if layer_of(module_name(p)) < LAYERS.index("cli")]
    found = {str(p.relative_to(PKG)): runs_the_cli(p.read_text(), commands) for p in below}
    found = {m: where for m, where in found.items() if where}
    # no argv for `minitrain lab-run`, no CLI `main` handed on, no `python -m minitrain` (importing
    # minitrain.cli from below is an upward import: the rule above)
    assert not found, found


def test_the_cli_rule_sees_a_command_line_built_below_it():
    source = ('def f(x, k):\n    run_lab(x, main=main)\n    h(main=None)\n    argv = ["lab-run", "--seed", k]\n'
              '    subprocess.run([sys.executable, "-m", "minitrain", *argv])\n'
              '    ok = [("train", rows), ["lab", "file"]]\n')
    assert runs_the_cli(source, {"lab-run", "train"}) == [
        "line 2: run_lab(main=...)", "line 4: ['lab-run', '--seed', k]",
        "line 5: [sys.executable, '-m', 'minitrain', *argv]"]


def test_the_rule_catches_an_upward_import_inside_a_function():
    """The checker itself: a core module importing the CLI inside a function is seen and is upward."""
    found = imports_in("def f():\n    from minitrain.cli import main\n    from minitrain.run import files\n",
                       "minitrain.core.probe")
    assert [m for _, m, _ in found] == ["minitrain.cli", "minitrain.run.files"]
    assert all(layer_of(m) > layer_of("minitrain.core.probe") for _, m, _ in found)
    assert imports_in("from minitrain.core.fmt import _private\n", "minitrain.lab.x")[0][2] == ["_private"]


# --- views/ draw and lab/ orchestrate: a threshold comparison (a judgment) belongs to analysis/ ------------------

THRESHOLD_NAMES = {"T", "THRESHOLDS", "GN1_HEALTHY"}  # analysis/thresholds.py's tables, however imported


def _literal(node: ast.AST) -> float | None:
    """The number a literal operand stands for (-0.5 included); None for anything else."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = _literal(node.operand)
        return None if inner is None else (-inner if isinstance(node.op, ast.USub) else inner)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    return None


def _analysis_constant(node: ast.AST, from_analysis: set[str]) -> bool:
    """`SPIKE`, `compare.SPIKE`, `T["x"]`, `stability.T["x"]`: an upper-case name imported from analysis/."""
    if isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Name):
        return node.id in from_analysis and node.id.isupper()
    if isinstance(node, ast.Attribute):
        root = node.value
        while isinstance(root, ast.Attribute):
            root = root.value
        return isinstance(root, ast.Name) and root.id in from_analysis and node.attr.isupper()
    return False


def judgments_in(source: str, here: str) -> list[str]:
    """Where a module judges by itself: it imports analysis/thresholds.py (the module or its tables), orders a
    value against a constant of analysis/ (`x > compare.SPIKE`, `g < T["gn1_low"]`), or orders a value against
    a numeric literal other than 0 and 1 (`ratio > 2`, `share >= 0.5`) unless that value is a count
    (`len(rows) > 8`, a layout decision). Equality tests and comparisons with 0 or 1 (sign, emptiness, a
    counter's first step) are layout."""
    tree = ast.parse(source)
    found, from_analysis = [], set()
    for line, mod, names in imports_in(source, here):
        if mod == "minitrain.analysis.thresholds" or (mod.startswith("minitrain.analysis") and
                                                       THRESHOLD_NAMES & set(names)):
            found.append(f"line {line}: imports the tree's thresholds ({mod})")
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("minitrain.analysis"):
            from_analysis |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            from_analysis |= {a.asname or a.name for a in node.names if a.name.startswith("minitrain.analysis")}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in THRESHOLD_NAMES:
            found.append(f"line {node.lineno}: reads {ast.unparse(node)}")
        if not isinstance(node, ast.Compare) or not any(isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE))
                                                        for op in node.ops):
            continue
        sides = [node.left, *node.comparators]
        counts = any(isinstance(s, ast.Call) and isinstance(s.func, ast.Name) and s.func.id == "len" for s in sides)
        for side in sides:
            value = _literal(side)
            if _analysis_constant(side, from_analysis) or (value is not None and value not in (0, 1) and not counts):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
                break
    return found


JUDGE_FREE_MODULES = [p for p in MODULES if module_name(p).split(".")[1:2] in (["views"], ["lab"])]


@pytest.mark.parametrize("path", JUDGE_FREE_MODULES, ids=lambda p: str(p.relative_to(PKG)))
def test_views_and_lab_judge_nothing_themselves(path):
    bad = judgments_in(path.read_text(), module_name(path))
    assert not bad, f"{module_name(path)} judges by itself (ask analysis/ instead): {bad}"


def test_the_judgment_rule_catches_a_health_check_written_in_a_view():
    """The checker itself, on the step-0 loss, first-step norm and LR checks as a view once wrote them, and on
    layout code it must leave alone."""
    view = '''
from minitrain.analysis.stability import T
from minitrain.analysis import compare, stability

def health(l0, ln_v, g0, lrs, ratio, excess):
    ok = abs(l0 - ln_v) <= T["loss0_band"]
    bad = g0 > stability.T["gn1_high"] or ratio > 2 or excess >= compare.SPIKE
    flat = (max(lrs) - min(lrs)) / max(lrs) < 1e-3 or l0 - ln_v > -0.5
'''
    found = "\n".join(judgments_in(view, "minitrain.views.x"))
    for needle in ("line 2: imports the tree's thresholds", "line 6: abs(l0 - ln_v) <= T['loss0_band']",
                   "line 7: reads stability.T", "line 7: g0 > stability.T['gn1_high']", "line 7: ratio > 2",
                   "line 7: excess >= compare.SPIKE", "line 8: (max(lrs) - min(lrs)) / max(lrs) < 0.001",
                   "line 8: l0 - ln_v > -0.5"):
        assert needle in found, (needle, found)
    layout = '''
from minitrain.analysis import panels

def lay_out(rows, spikes, items, x, n):
    shown = ", ".join(spikes[:6]) + (" ..." if len(spikes) > 6 else "")
    first = [r for r in rows if r["step"] == 0 and x > 0 and n >= 1 and len(items) < 3]
    return panels.cite("grad"), shown, first, x < n
'''
    assert judgments_in(layout, "minitrain.views.y") == []


# --- the pages' scripts draw too: a threshold comparison in views/assets/*.js is a judgment -----------------------

JS_ASSETS = sorted((PKG / "views" / "assets").glob("*.js"))
_JS_NUMBER = r"-?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?"
_JS_ORDER = r"(?<![<>=!])(?:<=|>=|<|>)(?![<>=])"  # not =>, <<, >>, <<=
_JS_STRING = re.compile(r"'(?:\\.|[^'\\\n])*'|\"(?:\\.|[^\"\\\n])*\"")
_JS_ORDERED = re.compile(rf"(?<![\w.])({_JS_NUMBER})\s*{_JS_ORDER}|{_JS_ORDER}\s*\(?\s*({_JS_NUMBER})(?![\w.])")


def js_judgments_in(source: str) -> list[str]:
    """Where a page script judges by itself: it orders a value against a number other than 0 and 1
    (`ratio > 2`, `x >= 0.5`). Layout aside: a count (`.length`), a loop's bound, or a line marked
    `// layout: why` (on it or just above it: pixels, tick labels, number notation)."""
    source = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), source, flags=re.S)
    found, above = [], ""
    for n, line in enumerate(source.splitlines(), 1):
        code, _, comment = _JS_STRING.sub('""', line).partition("//")
        marked, above = "layout" in comment or "layout" in above, comment if not code.strip() else ""
        if marked or ".length" in code or re.search(r"\bfor\s*\(", code):
            continue
        if any(float(m.group(1) or m.group(2)) not in (0, 1) for m in _JS_ORDERED.finditer(code)):
            found.append(f"line {n}: {line.strip()}")
    return found


@pytest.mark.parametrize("path", JS_ASSETS, ids=lambda p: p.name)
def test_page_scripts_judge_nothing_themselves(path):
    bad = js_judgments_in(path.read_text())
    assert not bad, f"views/assets/{path.name} judges by itself (put the rule in analysis/, its result in the data): {bad}"


def test_the_js_judgment_rule_catches_a_threshold_and_leaves_layout_alone():
    script = """
var clipOff = !(CFG.grad_clip > 0.5), big = ratio >= 2 || 3 < y;
if (x < -0.5) warn('<b>' + "a > 2");
/* a comment: x > 9 */ var f = (a) => a >= 1e-3;
for (var n = 2; n <= 4; n++) cols(n);
if (rows.length > 6 && d >> 2 > 0 && v === 1) more();
// layout: a drag of a few pixels is a click
if (drag.width > 4) zoom();
var narrow = w < 360;  // layout: one column
"""
    found = "\n".join(js_judgments_in(script))
    for line in (2, 3, 4):
        assert f"line {line}:" in found, (line, found)
    assert all(f"line {line}:" not in found for line in (5, 6, 8, 9)), found


# --- non-finite has one definition: run/nonfinite.py (analysis/definitions.py lists it) ---------------------------

NON_FINITE_HOMES = {"minitrain.run.nonfinite", "minitrain.analysis.definitions"}
ROW_FIELDS = ("loss", "grad_norm")


def _row_field(node: ast.AST) -> str | None:
    """`row["loss"]`, `r.get("grad_norm")`: which row field a node reads (None for anything else)."""
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        key = node.slice.value
    elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
          and node.args and isinstance(node.args[0], ast.Constant)):
        key = node.args[0].value
    else:
        return None
    return key if key in ROW_FIELDS else None


def non_finite_checks_in(source: str) -> list[str]:
    """Where a module decides by itself whether a metrics row is non-finite: `row["loss"] is None or
    row["grad_norm"] is None` (any order, any mix of [] and .get), or `isfinite(...)` of a row's loss or
    gradient norm. A single `is None` on the loss (a missing value skipped) is not a verdict on the row."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
            fields = {_row_field(v.left) for v in node.values if isinstance(v, ast.Compare)
                      and isinstance(v.ops[0], ast.Is) and isinstance(v.comparators[0], ast.Constant)
                      and v.comparators[0].value is None}
            if {"loss", "grad_norm"} <= fields:
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
        elif (isinstance(node, ast.Call) and (getattr(node.func, "attr", None) == "isfinite"
                                              or getattr(node.func, "id", None) == "isfinite")
              and any(_row_field(a) for arg in node.args for a in ast.walk(arg))):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


NON_FINITE_SCANNED = [p for p in MODULES if module_name(p) not in NON_FINITE_HOMES]


@pytest.mark.parametrize("path", NON_FINITE_SCANNED, ids=lambda p: str(p.relative_to(PKG)))
def test_non_finite_is_decided_in_one_place(path):
    bad = non_finite_checks_in(path.read_text())
    assert not bad, f"{module_name(path)} decides non-finite by itself (use run/nonfinite.py): {bad}"


def test_the_non_finite_rule_catches_a_copy():
    copy = '''
import math

def first_bad(rows, r):
    a = [s for s in rows if s.get("loss") is None or s.get("grad_norm") is None]
    b = r["grad_norm"] is None or r["loss"] is None
    c = not math.isfinite(r["loss"])
    d = np.isfinite(float(r.get("grad_norm")))
    return [x for x in rows if x.get("loss") is not None and x["val_loss"] is None or x["lr"] is None]
'''
    found = "\n".join(non_finite_checks_in(copy))
    for line in (5, 6, 7, 8):
        assert f"line {line}:" in found, (line, found)
    assert "line 9:" not in found


# --- a run folder's files are read in run/ only (run/reader.py states the rule) ----------------------

BENCH = PKG.parents[1] / "bench"
# Every module but run/'s, and the benches. Each scanned file is named by its path without .py, relative to
# src/minitrain (bench files as bench/NAME).
READ_SCANNED = sorted([*(p for p in MODULES if p.relative_to(PKG).parts[0] != "run"), *BENCH.glob("*.py")])

# Reads of files that are not a run folder's, by (module or package, enclosing function).
ALLOWED_READS = {
    ("core/config", "load_yaml"),  # the config parser: a --config file; a run's config.yaml via reader.read_config
    ("core/data", "cached_ngram_baseline"),  # the n-gram baseline's cache in the user's cache folder
    ("cli", "_config_from_args"),  # the user's --config file
    ("analysis/report", "write_markdown"),  # docs/stability-check.md, compared with its new text
    ("lab/postmortem", "write_postmortem"),  # the post-mortem template (docs/ or --template)
    ("lab/learner", "read_reference"),  # the reference solutions shipped with the repository
    ("lab/learner", "read_history"),  # the learner's reveal history (learners/NAME/)
    ("lab/learner", "log_reveal"),  # the same history, read before a line is appended
    ("lab/learner", "reveal"),  # the learner's diagnoses file, sealed at the reveal
    ("lab/learner", "grade"),  # the diagnoses file as it is now, against its seal
    ("lab/learner", "check"),  # the diagnoses file and notes/lessons.md
    ("lab/runner", "read_log"),  # a child process's log: a temporary file the runner made
    ("lab/ray_backend", "process_tree"),  # /proc: the processes a local Ray cluster started
    ("lab/ray_backend", "reap"),  # /proc: a watched process's start time, before it is killed
    ("views/index", "refuse_foreign_index"),  # the index.html already there: minitrain's table or a user's page
    ("bench/eval_diagnosis", "write_docs"),  # docs/diagnosis.md, its generated block replaced
    ("bench/eval_diagnosis", "read_results"),  # the evaluation's own results.json (--docs-from)
    ("bench/remediation_noise", "write_doc"),  # docs/remediation.md, its measured block replaced
    ("bench/eval_inverse", "write_section"),  # docs/diagnosis.md: its section is spliced between markers
    ("bench/eval_inverse", "main"),  # the bench's own results file (SUITE/results.json), to re-score nothing
    ("bench/foreign_suite", "run_key"),  # the foreign trainers' own source, hashed into the cache key
    ("bench/foreign_suite", "flags"),  # a foreign trainer's trained.json (its vocabulary size): no minitrain run
}
# The calls that read a file: open in a reading mode (the builtin, io.open, Path.open, os.open), the methods
# below, the loaders below (by their dotted name, or by their own name whatever module they come from).
READ_METHODS = {"read_text", "read_bytes"}
LOADERS = {"json.load", "torch.load", "np.load", "numpy.load"}
LOADER_NAMES = {"load_file", "safe_open", "from_file", "load_yaml"}
PARSERS = {"json.loads", "yaml.safe_load", "yaml.load"}  # a file read when given what a .read*() returned


def dotted_name(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def is_package_resource(node: ast.AST) -> bool:
    """X.read_text() where X comes from importlib.resources.files(...): a file of the installed package."""
    while isinstance(node, (ast.Attribute, ast.Call)):
        if isinstance(node, ast.Call) and dotted_name(node.func).endswith("resources.files"):
            return True
        node = node.func if isinstance(node, ast.Call) else node.value
    return False


def opens_to_read(call: ast.Call, mode_at: int) -> bool:
    """open(path, mode) or path.open(mode): a read unless the mode only writes ("w", "ab", "x")."""
    mode = call.args[mode_at] if len(call.args) > mode_at else next((k.value for k in call.keywords if k.arg == "mode"), None)
    return not (isinstance(mode, ast.Constant) and isinstance(mode.value, str) and not set(mode.value) & set("r+"))


def reads_a_file(call: ast.Call) -> bool:
    name, func = dotted_name(call.func), call.func
    if name in LOADERS or name.rsplit(".", 1)[-1] in LOADER_NAMES:
        return True
    if name == "os.open":  # a read unless its flags say write-only
        return not any(isinstance(n, ast.Attribute) and n.attr == "O_WRONLY" for a in call.args[1:2] for n in ast.walk(a))
    if name in ("open", "io.open"):
        if call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, int):
            return False  # a standard stream's descriptor, not a file
        return opens_to_read(call, 1)
    if isinstance(func, ast.Attribute) and func.attr in READ_METHODS | {"open"}:
        if is_package_resource(func.value):
            return False
        return func.attr in READ_METHODS or opens_to_read(call, 0)
    if name in PARSERS:
        return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr.startswith("read")
                   for arg in call.args for n in ast.walk(arg))
    return False


def file_reads(source: str) -> list[tuple[int, str, str]]:
    """(line, enclosing function or "<module>", call) of every file read in a module's source."""
    out = []

    def visit(node: ast.AST, function: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = node.name
        if isinstance(node, ast.Call) and reads_a_file(node):
            out.append((node.lineno, function, ast.unparse(node.func)))
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(ast.parse(source), "<module>")
    return out


def scanned_name(path: Path) -> str:
    base = PKG if path.is_relative_to(PKG) else BENCH.parent
    return path.relative_to(base).with_suffix("").as_posix()


def allowed_read(module: str, function: str) -> tuple[str, str] | None:
    """The allow-list entry that covers a read, or None; an entry's module also covers a package of that name."""
    for entry_module, entry_function in ALLOWED_READS:
        if (module == entry_module or module.startswith(entry_module + "/")) and function == entry_function:
            return entry_module, entry_function
    return None


def test_run_files_are_read_in_run_only():
    used, bad = set(), []
    for path in READ_SCANNED:
        module = scanned_name(path)
        for line, function, call in file_reads(path.read_text()):
            entry = allowed_read(module, function)
            if entry is None:
                bad.append(f"{module}.py:{line} {call}() in {function}")
            used.add(entry)
    assert not bad, ("read a run folder's files through minitrain.run.reader (or, for a file that is no run's, add "
                     f"(module, function) to ALLOWED_READS with a comment saying what it reads): {bad}")
    stale = sorted(ALLOWED_READS - used)
    assert not stale, f"ALLOWED_READS entries that read nothing any more; remove them: {stale}"


def test_the_read_rule_catches_every_way_of_reading_a_file():
    """The checker itself, on the shapes the project's leaks had and on the reads it must let pass."""
    caught = [
        'def f(run):\n    return json.loads((run / "remediation.json").read_text())\n',
        'def f(out):\n    return json.loads((out / "manifest.json").read_text())\n',
        'def f(run):\n    return len((run / "metrics.jsonl").read_bytes().splitlines())\n',
        'def f(path):\n    with open(path, "rb") as f:\n        return f.read()\n',
        'def f(path):\n    with open(path) as f:\n        return json.load(f)\n',
        'def f(path):\n    with path.open() as f:\n        return f.read()\n',
        'def f(path):\n    return load_file(path / "model.safetensors")\n',
        'def f(path):\n    return safetensors.torch.load_file(path)\n',
        'def f(path):\n    return Tokenizer.from_file(str(path / "tokenizer.json"))\n',
        'def f(run):\n    return load_yaml(run / "config.yaml")\n',
        'def f(stream):\n    return json.loads(stream.read())\n',
        'def f(path):\n    return os.open(path, os.O_RDONLY)\n',
    ]
    for source in caught:
        assert len(file_reads(source)) >= 1, source
    passed = [
        'def f(proc):\n    return json.loads(proc.stdout.strip())\n',
        'def f():\n    return open(1, "w", closefd=False)\n',
        'def f(log):\n    return os.open(log, os.O_WRONLY | os.O_APPEND)\n',
        'def f(path):\n    with open(path, "ab") as f:\n        f.truncate(0)\n',
        'def f(path):\n    with path.open("w") as f:\n        f.write("x")\n',
        'def f(name):\n    return resources.files("minitrain.views").joinpath("assets", name).read_text()\n',
        'def f(run):\n    return reader.read_optional_json(run / "remediation.json")\n',
    ]
    for source in passed:
        assert file_reads(source) == [], source
    assert file_reads("def last_step(run):\n    open(run)\n") == [(2, "last_step", "open")]
    assert allowed_read("lab/learner/seal", "log_reveal") and allowed_read("lab/learner", "grade")
    assert not allowed_read("lab/postmortem", "render") and not allowed_read("lab/learnerx", "grade")
