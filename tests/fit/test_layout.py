"""scalerl.fit's layers import one way; the kept import paths are the new homes' objects; the
commands keep their flags, declared once.

Layers, bottom to top (docs/design.md, "Package layout"): curves -> readers -> forecast ->
report -> commands. Imports are read from the source with `ast` (function-level ones count),
so a new module is covered by default: one outside the layer folders fails until it is placed.
"""

import argparse
import ast
import graphlib
import importlib
from pathlib import Path

import pytest

from scalerl.cli import COMMANDS
from scalerl.fit.commands.options import FIT_OPTIONS, fit_config
from scalerl.fit.curves.sigmoid import FitConfig

FIT = Path(__file__).resolve().parents[2] / "scalerl" / "fit"
LAYERS = ("curves", "readers", "forecast", "report", "commands")  # bottom to top
KEPT_PATHS = ("sigmoid", "predict")  # scalerl.fit.<name>: re-exports for users, no code


def modules() -> dict[str, Path]:
    """{dotted name: file} of every module of scalerl/fit."""
    out = {}
    for path in sorted(FIT.rglob("*.py")):
        parts = path.relative_to(FIT.parent.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def fit_imports(path: Path) -> list[str]:
    """The scalerl.fit modules (or the face) a file imports, lazily or not (those under `if
    TYPE_CHECKING:`, for annotations only, do not run and do not count)."""
    tree = ast.parse(path.read_text())
    typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                   and "TYPE_CHECKING" in ast.unparse(block.test) for n in ast.walk(block)}
    names = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            base = node.module
            names += [f"{base}.{a.name}" if f"{base}.{a.name}" in modules() else base
                      for a in node.names]
        elif isinstance(node, ast.Import):
            names += [a.name for a in node.names]
    return [n for n in names if n == "scalerl.fit" or n.startswith("scalerl.fit.")]


def layer_of(module: str) -> int | None:
    parts = module.split(".")
    return LAYERS.index(parts[2]) if len(parts) > 2 and parts[2] in LAYERS else None


def test_every_module_sits_in_a_layer():
    loose = [m for m in modules() if layer_of(m) is None
             and m not in ("scalerl.fit", *(f"scalerl.fit.{k}" for k in KEPT_PATHS))]
    assert not loose, f"place {loose} in one of the layers {LAYERS} (scalerl/fit/<layer>/)"


@pytest.mark.parametrize("module", [m for m in modules() if layer_of(m) is not None])
def test_no_module_imports_a_higher_layer_or_the_face(module):
    bad = []
    for target in fit_imports(modules()[module]):
        if layer_of(target) is None:  # the face or a kept path: for users only
            bad.append(f"imports {target}: import the module itself")
        elif layer_of(target) > layer_of(module):
            bad.append(f"imports {target} (layer {LAYERS[layer_of(target)]} is above "
                       f"{LAYERS[layer_of(module)]})")
    assert not bad, f"{module}: " + "; ".join(bad)


def test_nothing_in_scalerl_imports_the_kept_paths():
    kept = {f"scalerl.fit.{k}" for k in KEPT_PATHS}
    root = FIT.parent
    bad = [f"{path.relative_to(root.parent)} imports {name}"
           for path in sorted(root.rglob("*.py")) for name in fit_imports(path) if name in kept]
    assert not bad, "\n".join(bad)


def test_no_import_cycle_inside_fit():
    graph = {m: {t for t in fit_imports(p) if t in modules() and t != m}
             for m, p in modules().items() if m != "scalerl.fit"}
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as err:
        pytest.fail("import cycle: " + " -> ".join(err.args[1]))


@pytest.mark.parametrize("module", [m for m, p in modules().items() if p.name != "__init__.py"])
def test_every_module_says_what_it_does_and_leaves_out(module):
    doc = ast.get_docstring(ast.parse(modules()[module].read_text())) or ""
    assert doc and "left out" in doc, f"{module}: the docstring says what it leaves out"


@pytest.mark.parametrize("old, new", [("scalerl.fit.sigmoid", "scalerl.fit.curves.sigmoid"),
                                      ("scalerl.fit.predict", "scalerl.fit.forecast.predict")])
def test_kept_import_paths_are_the_new_homes_objects(old, new):
    kept, home = importlib.import_module(old), importlib.import_module(new)
    assert set(home.__all__) <= set(kept.__all__)
    for name in kept.__all__:
        assert getattr(kept, name) is getattr(home, name), f"{old}.{name}"


def test_public_entry_points():
    from scalerl.fit import FitConfig as face_config
    from scalerl.fit import predict_across as face_across
    from scalerl.fit import predict_final as face_predict
    from scalerl.fit.forecast.across import predict_across
    from scalerl.fit.forecast.predict import predict_final
    from scalerl.fit.predict import predict_final as kept_predict
    from scalerl.fit.sigmoid import FitConfig as kept_config

    assert face_predict is kept_predict is predict_final
    assert face_config is kept_config is FitConfig
    assert face_across is predict_across
    for name in ("fit", "predict", "across", "race", "watch", "report", "prior"):
        module = importlib.import_module(COMMANDS[name][0])
        assert module.__name__ == f"scalerl.fit.commands.{name}"
        assert callable(module.add_arguments) and callable(module.run)


def _options(command: str) -> set[str]:
    parser = argparse.ArgumentParser()
    importlib.import_module(COMMANDS[command][0]).add_arguments(parser)
    return {s for a in parser._actions for s in a.option_strings} - {"-h", "--help"}


INPUTS = {"--metric", "--reward-col", "--compute-col", "--group-by", "--experiment", "--run-id"}
FORECAST_FIT = {"--r0", "--cutoff", "--cutoff-fraction", "--bootstrap", "--seed", "--weighting",
                "--config"}
FINAL = {"--final-step", "--final-compute"}


@pytest.mark.parametrize("command, expected", [
    ("fit", INPUTS | FORECAST_FIT | {
        "--out", "--extrapolate-fraction", "--bootstrap-method", "--paper-grid", "--a-min",
        "--a-max", "--a-step", "--cmid-min", "--cmid-max", "--cmid-points", "--b-min",
        "--b-max", "--cmid-spacing", "--no-power-law", "--meta", "--tracking"}),
    ("predict", INPUTS | FORECAST_FIT | FINAL | {
        "--run-config", "--eval", "--chunks", "--out", "--all-chunks", "--force", "--backtest",
        "--at", "--prior", "--joint", "--joint-by", "--sweep-eval"}),
    ("race", INPUTS | FORECAST_FIT | FINAL | {
        "--predictions", "--task", "--margin", "--min-fraction", "--form", "--group",
        "--seed-pattern", "--no-observed", "--out", "--prior"}),
    ("watch", INPUTS | FORECAST_FIT | FINAL | {
        "--out", "--interval", "--max-polls", "--min-fraction", "--margin", "--prior"}),
    ("across", INPUTS | (FORECAST_FIT - {"--r0"}) | FINAL | {
        "--size", "--axis", "--target-size", "--target-len", "--target-r0", "--out"}),
    ("report", {"--out", "--by", "--order", "--predictions", "--racing", "--steps", "--size"}),
    ("prior", {"--out", "--curves", "--exclude-source", "--max-points"}),
])
def test_commands_keep_their_flags(command, expected):
    assert _options(command) == expected


def test_each_fit_flag_is_declared_once_and_sets_its_field():
    fields = set(FitConfig.__dataclass_fields__)
    assert all(opt.field in fields for opt in FIT_OPTIONS)
    assert {o.flag for o in FIT_OPTIONS if o.forecast} | {"--config"} == FORECAST_FIT
    assert {o.flag for o in FIT_OPTIONS} <= _options("fit")
    for command in ("fit", "predict", "race", "watch"):
        parser = argparse.ArgumentParser()
        importlib.import_module(COMMANDS[command][0]).add_arguments(parser)
        argv = ["x.csv", "--r0", "0.25", "--seed", "3", "--weighting", "noise",
                "--cutoff-fraction", "0.1"] + {"fit": ["--out", "o", "--no-power-law",
                                                       "--extrapolate-fraction", "none",
                                                       "--a-min", "0.4"],
                                               "watch": ["--final-step", "9"]}.get(command, [])
        config = fit_config(parser.parse_args(argv))
        assert (config.r0, config.bootstrap_seed, config.weighting, config.cutoff_fraction) \
            == (0.25, 3, "noise", 0.1), command
        if command == "fit":
            assert (config.power_law, config.extrapolate_fraction, config.a_min) == \
                (False, None, 0.4)
        else:
            assert config.power_law and config.bootstrap_n == FitConfig().bootstrap_n


def test_paper_grid_then_flags_override(tmp_path):
    parser = argparse.ArgumentParser()
    importlib.import_module(COMMANDS["fit"][0]).add_arguments(parser)
    (tmp_path / "fit.yaml").write_text("a_step: 0.01\nbootstrap_n: 7\n")
    args = parser.parse_args(["x.csv", "--out", "o", "--paper-grid", "--a-max", "0.9",
                              "--config", str(tmp_path / "fit.yaml")])
    config = fit_config(args)
    paper = FitConfig.paper()
    assert (config.a_min, config.a_max, config.a_step, config.cmid_max, config.bootstrap_n) == \
        (paper.a_min, 0.9, paper.a_step, paper.cmid_max, 7)
