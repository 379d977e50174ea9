"""Fault injection for prompts.parquet: truncated or schema-drifted files give errors that name
the file and the problem, and leave the files already in the output directory unchanged."""
import hashlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from scalerl.data.io import read_prompts


def _checksums(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_truncated_prompts_file_names_the_file_and_leaves_outputs(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "steps.txt").write_text("prior output\n")
    table = pa.table({"prompt_id": ["a", "b"], "x": [1, 2]})
    path = tmp_path / "prompts.parquet"
    pq.write_table(table, path)
    path.write_bytes(path.read_bytes()[:20])  # truncate: footer gone
    before = _checksums(out)
    with pytest.raises(ValueError) as err:
        read_prompts(path)
    assert str(path) in str(err.value) and "scalerl data" in str(err.value)
    assert _checksums(out) == before


def test_schema_drifted_prompts_file_names_missing_columns(tmp_path):
    path = tmp_path / "prompts.parquet"
    pq.write_table(pa.table({"prompt_id": ["a"], "question": ["q"]}), path)
    with pytest.raises(ValueError) as err:
        read_prompts(path)
    assert str(path) in str(err.value) and "missing column" in str(err.value)
