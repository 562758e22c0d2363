"""The package's shape, checked: layers import only downwards, nothing imports in a loop, no
module over 500 lines and no function over 60.  Read from the source with ``ast``, so a
function-level import counts as much as one at the top of a file."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "fpsim"

# Layer of every module, from the ground up (ARCHITECTURE.md); a module may import its
# own layer and the ones below, never a higher one.
LAYERS = [
    ("ground", ["fpsim.state", "fpsim.numerics", "fpsim.formats", "fpsim.textable", "fpsim.checks", "fpsim.tensorcore",
                "fpsim.tensorcore_fp8", "fpsim.tensorcore_compiled", "fpsim.registry"]),
    ("core", ["fpsim.backend", "fpsim.tensor", "fpsim.ops"]),
    ("modules", ["fpsim.statedict", "fpsim.nn", "fpsim.optim", "fpsim.optim_state", "fpsim.amp", "fpsim.checkpoint"]),
    ("low-precision recipes", ["fpsim.lowp", "fpsim.fp8"]),
    ("instruments", ["fpsim.monitor", "fpsim.capture", "fpsim.trace", "fpsim.outliers"]),
    ("experiments", ["fpsim.experiments", "fpsim.data", "fpsim.examples"]),
    ("tools", ["fpsim.tools"]),
    ("labs support", ["fpsim.labs"]),
]
TOP = {"fpsim", "fpsim.__main__"}  # the package's front door may import anything


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def _layer(mod: str) -> int:
    for i, (_, prefixes) in enumerate(LAYERS):
        if any(mod == p or mod.startswith(p + ".") for p in prefixes):
            return i
    raise AssertionError(f"{mod} belongs to no layer: add it to LAYERS (and to ARCHITECTURE.md)")


def _imports(mod: str, path: Path) -> set[str]:
    """The fpsim modules ``mod`` imports (``from . import nn`` is an import of fpsim.nn)."""
    is_pkg = path.name == "__init__.py"
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                pkg = ".".join(base[: len(base) - node.level + 1])
                src = f"{pkg}.{node.module}" if node.module else pkg
            else:
                src = node.module or ""
            targets = [f"{src}.{a.name}" if f"{src}.{a.name}" in MODULES else src for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in MODULES:
                t = t.rpartition(".")[0]
            if t and t != mod and t.startswith("fpsim"):
                out.add(t)
    return out


GRAPH = {m: _imports(m, p) for m, p in MODULES.items()}


def test_every_module_has_a_layer():
    for m in MODULES:
        if m not in TOP:
            _layer(m)


def test_no_import_reaches_up_a_layer():
    bad = []
    for m, deps in GRAPH.items():
        if m in TOP:
            continue
        for d in deps:
            if d not in TOP and _layer(d) > _layer(m):
                bad.append(f"{m} ({LAYERS[_layer(m)][0]}) imports {d} ({LAYERS[_layer(d)][0]})")
            if d == "fpsim" and _layer(m) < _layer("fpsim.experiments"):
                # the root imports layers up to the instruments: from below it, that is a loop
                bad.append(f"{m} imports the package root fpsim; import the module it needs")
    assert not bad, "imports up the layers:\n" + "\n".join(sorted(bad))


def test_no_import_loops():
    """No cycle at all in the module graph (Tarjan's strongly connected components)."""
    index, low, on, stack, cycles = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in GRAPH.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in GRAPH:
        if v not in index:
            visit(v)
    assert not cycles, f"import loops: {cycles}"


def test_the_engine_core_imports_no_op_module():
    """tensor.py stands alone: the ops bind themselves onto Tensor (no tensor -> ops import)."""
    assert "fpsim.ops" not in GRAPH["fpsim.tensor"]


@pytest.mark.parametrize("mod", sorted(MODULES), ids=str)
def test_module_and_function_sizes(mod):
    path = MODULES[mod]
    lines = path.read_text().count("\n")
    assert lines <= 500, f"{path.relative_to(ROOT.parent)} has {lines} lines (at most 500)"
    long = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            n = node.end_lineno - node.lineno + 1
            if n > 60:
                long.append(f"{node.name} ({n} lines)")
    assert not long, f"{path.relative_to(ROOT.parent)}: functions over 60 lines: {', '.join(long)}"


def test_one_owner_of_program_wide_state():
    """Only fpsim/state.py declares module-level mutable state that other modules write
    (``global`` statements); everything else goes through its functions."""
    writers = []
    for m, path in MODULES.items():
        if m in ("fpsim.state",):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Global):
                writers.append(f"{m}: global {', '.join(node.names)}")
    assert not writers, "program-wide state outside fpsim/state.py:\n" + "\n".join(writers)


def test_one_name_one_thing():
    """No two modules export (``__all__``) different objects under one name - a concept is
    defined once and imported everywhere else.  Allowed: each tool package's ``main`` (the
    command's entry)."""
    import importlib
    import pkgutil
    import warnings

    import fpsim

    allowed = {"main"}
    seen: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for m in pkgutil.walk_packages(fpsim.__path__, "fpsim."):
            if m.name in ("fpsim.fp8", "fpsim.__main__") or ".solutions" in m.name:
                continue
            mod = importlib.import_module(m.name)
            for name in getattr(mod, "__all__", ()):
                seen.setdefault(name, {}).setdefault(id(getattr(mod, name, None)), []).append(m.name)
    twice = {n: list(objs.values()) for n, objs in seen.items() if len(objs) > 1 and n not in allowed}
    assert not twice, twice
