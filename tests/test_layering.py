"""The package's import layers: lower layers never import upper ones (no package cycles).

models (architecture, tokenizer, log-probs) <- rollout (engines) <- basemodel (SFT uses the
engines) ; rl, eval, fit, sweep above. Read from the source with `ast`, so a cycle introduced
by a function-level import fails too (docs/design.md, "Package layout").
"""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "scalerl"
# package -> packages it must not import
FORBIDDEN = {
    "models": ("rollout", "basemodel", "rl", "eval", "fit", "sweep", "plan"),
    "rollout": ("basemodel", "rl", "eval", "fit", "sweep"),
    "tasks": ("models", "rollout", "basemodel", "rl", "eval", "fit", "sweep"),
    "rewards": ("models", "rollout", "basemodel", "rl", "eval", "fit", "sweep"),
    "fit": ("models", "rollout", "basemodel", "sweep"),  # (its CLIs read RunConfig)
}


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return {n.split(".")[1] for n in names if n.startswith("scalerl.") and n.count(".") >= 1}


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_lower_layers_do_not_import_upper_ones(layer):
    bad = []
    for path in sorted((PACKAGE / layer).rglob("*.py")):
        for target in sorted(_imports(path) & set(FORBIDDEN[layer])):
            bad.append(f"{path.relative_to(PACKAGE.parent)} imports scalerl.{target}")
    assert not bad, "\n".join(bad)
