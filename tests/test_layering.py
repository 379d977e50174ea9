"""The package's import layers: no unit imports a unit of a higher layer, and no cycles.

A unit is a subpackage of `scalerl` (`scalerl/rl/`) or a top-level module (`scalerl/config.py`).
The units are read from the tree, so a new package or module is covered by default: one that
is missing from `LAYERS` fails the test until it is placed there. Imports are read from the
source with `ast`, so a function-level import counts too (docs/design.md, "Package layout").
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
