"""The eval Parquet schema: building, validating, writing atomically and reading back."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from scalerl.eval.schema import (
    EVAL_SCHEMA,
    EvalSchemaError,
    build_eval_table,
    pass_rates,
    read_eval_table,
    validate_eval_table,
    write_eval_table,
)

META = {"scalerl.version": "0.1.0", "scalerl.config_hash": "abc", "scalerl.checkpoint": "x",
        "scalerl.k": "2"}


def _rows(k=2, prompts=(("m1", "math"), ("m2", "math"), ("c1", "code")), correct=None):
    rows = []
    for i, (pid, task) in enumerate(prompts):
        for s in range(k):
            ok = correct[i * k + s] if correct else (s == 0)
            rows.append({
                "run": "tiny-m_L48_scalerl_b16x8_s0", "model": "tiny-m", "gen_len": 48,
                "recipe": "scalerl", "seed": 0, "chunk": 2, "step": 20,
                "compute_flops": 1.5e12, "compute_device_hours": 0.01, "task": task,
                "test_type": "answer" if task == "math" else "program",
                "dataset": "val", "prompt_id": pid, "sample_idx": s,
                "reward": 1.0 if ok else -1.0, "correct": ok, "n_tokens": 30 + s,
                "truncated": False, "interrupted": s == 1, "response": f"<think>{s}</think>",
            })
    return rows


def test_build_write_read_roundtrip(tmp_path):
    table = build_eval_table(_rows(), META)
    assert table.schema.equals(EVAL_SCHEMA, check_metadata=False)
    path = write_eval_table(table, tmp_path / "eval" / "chunk2.parquet")
    back = read_eval_table(path)
    assert back.equals(table)
    meta = {k.decode(): v.decode() for k, v in pq.read_schema(path).metadata.items()}
    assert meta["scalerl.config_hash"] == "abc" and meta["scalerl.k"] == "2"
    assert list(tmp_path.joinpath("eval").iterdir()) == [path]  # no temp file left behind


def test_pass_rates_are_mean_at_k():
    # math: m1 = [1, 0], m2 = [1, 1] -> 3/4; code: c1 = [0, 0] -> 0; all: 3/6.
    table = build_eval_table(_rows(correct=[True, False, True, True, False, False]), META)
    assert pass_rates(table) == pytest.approx({"val/math": 0.75, "val/code": 0.0, "all": 0.5})


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda r: r[0].update(task="poetry"), "task"),
        (lambda r: r[1].update(sample_idx=0), "not unique"),
        (lambda r: r[0].update(step=21), "one value per file"),
        (lambda r: r[0].update(n_tokens=-1), "negative"),
        (lambda r: r.pop(), "different sample counts"),
        (lambda r: r[0].update(test_type="program"), "test_type.*not allowed"),  # a math row
        (lambda r: r[-1].update(test_type="answer"), "not allowed"),  # a code row
    ],
)
def test_invariants_are_enforced(change, message):
    rows = _rows()
    change(rows)
    with pytest.raises(EvalSchemaError, match=message):
        build_eval_table(rows, META)


def test_rows_with_missing_or_unknown_columns_are_rejected():
    rows = _rows()
    del rows[0]["response"]
    with pytest.raises(EvalSchemaError, match="missing columns \\['response'\\]"):
        build_eval_table(rows, META)
    rows = _rows()
    rows[0]["extra"] = 1
    with pytest.raises(EvalSchemaError, match="unknown columns \\['extra'\\]"):
        build_eval_table(rows, META)


def test_wrong_types_nulls_and_metadata_are_rejected():
    table = build_eval_table(_rows(), META)
    with pytest.raises(EvalSchemaError, match="gen_len.*int64"):
        validate_eval_table(table.set_column(2, "gen_len", table.column("gen_len").cast(pa.int64())))
    with pytest.raises(EvalSchemaError, match="metadata lacks"):
        validate_eval_table(table.replace_schema_metadata({}))
    with pytest.raises(EvalSchemaError, match="columns"):
        validate_eval_table(table.drop_columns(["dataset"]))
    with pytest.raises(EvalSchemaError, match="before the test_type column: evaluate"):
        validate_eval_table(table.drop_columns(["test_type"]))
    nulls = pa.array([None] * table.num_rows, pa.string())
    with pytest.raises(EvalSchemaError, match="nulls"):
        validate_eval_table(table.set_column(table.schema.get_field_index("response"),
                                             EVAL_SCHEMA.field("response"), nulls))
    with pytest.raises(EvalSchemaError, match="fit EVAL_SCHEMA"):
        build_eval_table([{**r, "reward": "high"} for r in _rows()], META)


def test_read_names_the_bad_file(tmp_path):
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"run": ["x"]}), path)
    with pytest.raises(EvalSchemaError, match="bad.parquet"):
        read_eval_table(path)
    with pytest.raises(FileNotFoundError):
        read_eval_table(tmp_path / "missing.parquet")
