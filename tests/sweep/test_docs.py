"""config/README.md's generated knob reference is in sync, and every recipe knob names its
section of the paper."""

import re
from pathlib import Path

import pytest

from scalerl.rl.length_penalty import LengthPenaltyConfig
from scalerl.rl.losses import LossConfig
from scalerl.rl.recipe import OptimizerConfig, RecipeConfig
from scalerl.sweep import docs

README = Path(__file__).resolve().parents[2] / "config" / "README.md"
PAPER_REF = re.compile(r"§\d|Eq\. \d|App\. A\.\d|not in the paper")


def test_generated_reference_is_in_sync():
    assert docs.main(["--check", str(README)]) == 0, (
        "config/README.md is out of date: python -m scalerl.sweep.docs --write config/README.md")


def test_check_fails_on_a_stale_file(tmp_path):
    stale = tmp_path / "README.md"
    stale.write_text(README.read_text().replace("k of mean@k", "k of mean at k"))
    assert docs.main(["--check", str(stale)]) == 1
    assert docs.main(["--write", str(stale)]) == 0 and stale.read_text() == README.read_text()
    with pytest.raises(ValueError, match="no generated section"):
        docs.render("no markers here")


@pytest.mark.parametrize("cls", [RecipeConfig, LossConfig, OptimizerConfig, LengthPenaltyConfig])
def test_every_recipe_knob_names_its_paper_section(cls):
    missing = [name for name, _, _, doc in cls.describe() if not PAPER_REF.search(doc)]
    assert not missing, f"{cls.__name__}: {missing} name no paper section (§, Eq., App.)"


def _documented_keys(data: dict) -> set[str]:
    """The keys of a sweep config as the reference names them: named entries as `<name>`
    (`<rule>`), recipe override layers as the recipe's own keys, `data.config` and
    `models.<name>.config` whole (the configs of `scalerl data` / `scalerl base`)."""
    named = {"models": "<name>", "recipes": "<name>", "mixes": "<name>",
             "resources": "<rule>", "eval.downstream": "<name>"}
    keys: set[str] = set()

    def walk(node: dict, prefix: str) -> None:
        for key, value in node.items():
            path = f"{prefix}{key}"
            if path in named:
                for entry in value.values():
                    walk(entry, f"{path}.{named[path]}.")
            elif path in ("data.config", "models.<name>.config"):
                keys.add(path)
            elif key in ("recipe_overrides", "overrides"):
                keys.add(path)
                walk(value, "")  # RecipeConfig keys
            elif isinstance(value, dict):
                walk(value, f"{path}.")
            else:
                keys.add(path)

    walk(data, "")
    return keys


@pytest.mark.parametrize("name", ["config.yaml", "gpu.yaml", "layout-1node-8gpu.yaml",
                                  "layout-2node-16gpu.yaml"])
def test_every_key_of_the_shipped_configs_is_documented(name):
    import yaml

    text = README.read_text().split(docs.BEGIN, 1)[1]
    data = yaml.safe_load((README.parent / name).read_text())
    missing = sorted(k for k in _documented_keys(data) if f"| `{k}` |" not in text)
    assert not missing, f"{name}: keys without a row in config/README.md: {missing}"


def test_the_sweep_sections_are_generated_with_their_defaults():
    text = README.read_text().split(docs.BEGIN, 1)[1]
    for row in ("| `fit.predict_args` | `[]` |", "| `train.chunks` | `4` |",
                "| `eval.downstream_chunks` | `\"last\"` |", "| `results_dir` | `\"results\"` |",
                '| `mixes` | `{"mc": {"math": 0.5, "code": 0.5}}` |',
                "| `resources.<rule>.nodes` | `1` |", "| `sweep.racing.margin` | `0.02` |"):
        assert row in text, row
