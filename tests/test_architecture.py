"""The package's layers (docs/architecture.md): imports only go down, no private name crosses a module, no cycle.

Every import counts, the ones inside functions too: they are read from the syntax tree of each module."""
from __future__ import annotations

import ast
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
    if top == "probe":  # the loop's instruments on a foreign training loop: the loop's layer
        return LAYERS.index("loop")
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


def test_the_rule_catches_an_upward_import_inside_a_function():
    """The checker itself: a core module importing the CLI inside a function is seen and is upward."""
    found = imports_in("def f():\n    from minitrain.cli import main\n    from minitrain.run import files\n",
                       "minitrain.core.probe")
    assert [m for _, m, _ in found] == ["minitrain.cli", "minitrain.run.files"]
    assert all(layer_of(m) > layer_of("minitrain.core.probe") for _, m, _ in found)
    assert imports_in("from minitrain.core.fmt import _private\n", "minitrain.lab.x")[0][2] == ["_private"]
