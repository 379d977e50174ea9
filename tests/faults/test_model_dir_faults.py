"""Fault injection for model dirs: a base model dir without tokenizer files is refused with an
error naming the dir and the fix; nothing in it is changed."""
import hashlib
from pathlib import Path

import pytest

from scalerl.models.loading import ModelNotFoundError, load_tokenizer, new_tiny_tokenizer


def _checksums(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_model_dir_without_tokenizer_names_dir_and_fix(tmp_path):
    base = tmp_path / "base"
    new_tiny_tokenizer().save_pretrained(str(base))
    assert load_tokenizer(base) is not None  # intact dir loads
    for name in ("tokenizer.json", "vocab.json", "vocab.txt", "tokenizer.model"):
        (base / name).unlink(missing_ok=True)
    before = _checksums(base)
    with pytest.raises(ModelNotFoundError) as err:
        load_tokenizer(base)
    assert str(base) in str(err.value) and "tokenizer" in str(err.value)
    assert "scalerl base`" in str(err.value)
    assert _checksums(base) == before
