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
