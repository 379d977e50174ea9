"""The package's import layers: no unit imports a unit of a higher layer, and no module import
cycle anywhere in scalerl.

A unit is a subpackage of `scalerl` (`scalerl/rl/`) or a top-level module (`scalerl/config.py`).
The units are read from the tree, so a new package or module is covered by default: one that
is missing from `LAYERS` fails the test until it is placed there. Imports are read from the
source with `ast`, so a function-level import counts too (docs/design.md, "Package layout").

Cycles are checked between modules as well as between units: module A imports module B when A
names B (`import scalerl.x.b`, `from scalerl.x import b`, `from scalerl.x.b import name`, or
the relative forms), at module level or inside a function; an import under
`if TYPE_CHECKING:` runs never and does not count. `from scalerl.x import name` of a name that
is not a module imports the package face `scalerl/x/__init__.py`, which counts like any module
(a submodule importing its own package's face while the face imports it is a cycle). The
implicit import of a module's parent packages does not count.
"""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "scalerl"
# bottom to top: a unit may import units of its own layer or of lower ones (and the same-layer
# imports may not form a cycle)
LAYERS = [
    ("__init__", "text", "config", "utils"),
    ("tasks", "tracking"),
    ("rewards", "models"),
    ("data", "rollout"),
    ("basemodel", "parallel"),  # parallel: process groups, FSDP2 sharding, sharded checkpoints
    ("rl",),
    ("eval", "fit", "sweep"),
    ("plan",),
    ("train", "cli", "__main__"),  # commands that span packages
]
LAYER = {unit: i for i, units in enumerate(LAYERS) for unit in units}


def units() -> list[str]:
    """Every subpackage and top-level module of scalerl/, from the tree."""
    out = [p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").is_file()]
    return sorted(out + [p.stem for p in PACKAGE.glob("*.py")])


def _unit_of(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def imports() -> dict[str, dict[str, list[str]]]:
    """{unit: {imported unit: [files that import it]}}."""
    graph: dict[str, dict[str, list[str]]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        unit = _unit_of(path)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                if name.startswith("scalerl.") and name.split(".")[1] != unit:
                    where = str(path.relative_to(PACKAGE.parent))
                    graph.setdefault(unit, {}).setdefault(name.split(".")[1], []).append(where)
    return graph


def _modules() -> dict[str, Path]:
    """{dotted module name: file}; a package is its `__init__.py`."""
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skip


def _imported_modules(name: str, path: Path, node: ast.AST, modules: dict) -> list[str]:
    """The scalerl modules an import statement of module `name` (file `path`) loads by name."""
    if isinstance(node, ast.Import):
        targets = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:  # relative: from the module's package, up level - 1 packages
            package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
            package = package[:len(package) - (node.level - 1)]
            base = ".".join(package + ([base] if base else []))
        targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                   for a in node.names]
    out = []
    for target in targets:
        while target and target not in modules:  # `import scalerl.x.y.z`: its deepest module
            target = target.rpartition(".")[0]
        if target and target != name:
            out.append(target)
    return out


def module_graph() -> dict[str, set[str]]:
    """{module: modules it imports} over every module of scalerl (module docstring)."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        skip = _type_checking_nodes(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in skip:
                graph[name].update(_imported_modules(name, path, node, modules))
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """The cycles of `graph`: its strongly connected components of more than one node (or one
    that imports itself), each sorted, largest first (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1 or node in graph[node]:
                        out.append(sorted(component))
    return sorted(out, key=lambda c: (-len(c), c))


def test_the_module_graph_sees_every_kind_of_import():
    """The graph's reading of imports, on modules whose imports are known: a module-level
    import, a function-level one, a package face, and one under TYPE_CHECKING (absent)."""
    graph = module_graph()
    assert "scalerl.rollout.config" in graph["scalerl.rollout.hf_engine"]  # module level
    assert "scalerl.rollout.hf_engine" in graph["scalerl.rollout.factory"]  # in a function
    assert "scalerl.tracking" in graph["scalerl.rl.trainer"]  # `from scalerl.tracking import`
    assert "scalerl.tracking.factory" in graph["scalerl.tracking"]  # the face's own import
    assert strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [
        ["a", "b", "c"]]
    assert strongly_connected({"a": {"a"}, "b": set()}) == [["a"]]


def test_no_import_cycles_between_modules():
    cycles = strongly_connected(module_graph())
    assert not cycles, f"{len(cycles)} import cycle(s) among the modules of scalerl:\n" + "\n".join(
        " <-> ".join(c) for c in cycles)


def test_every_unit_of_the_tree_has_a_layer():
    missing = [u for u in units() if u not in LAYER]
    assert not missing, f"place {missing} in LAYERS of tests/test_layering.py"
    gone = sorted(set(LAYER) - set(units()))
    assert not gone, f"LAYERS names units that no longer exist: {gone}"


@pytest.mark.parametrize("unit", units())
def test_no_unit_imports_a_higher_layer(unit):
    bad = [f"{files[0]} imports scalerl.{target} (layer {LAYER.get(target)} > {LAYER[unit]})"
           for target, files in sorted(imports().get(unit, {}).items())
           if LAYER.get(target, 99) > LAYER[unit]]
    assert not bad, "\n".join(bad)


def test_no_import_cycles_between_units():
    graph = {u: set(targets) for u, targets in imports().items()}
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(unit: str, path: list[str]) -> list[str] | None:
        state[unit] = 1
        for target in sorted(graph.get(unit, ())):
            if state.get(target) == 1:
                return path + [unit, target]
            if state.get(target) is None and (cycle := visit(target, path + [unit])):
                return cycle
        state[unit] = 2
        return None

    for unit in sorted(graph):
        if state.get(unit) is None and (cycle := visit(unit, [])):
            pytest.fail("import cycle: " + " -> ".join(cycle))
