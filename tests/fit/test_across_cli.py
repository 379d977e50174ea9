"""`scalerl across` (scalerl.fit.commands.across) and the sizes it reads
(scalerl.fit.readers.sizes): seeded synthetic size families written as CSV, per-sample eval
Parquet labelled through model directories, the generation-length axis, refusals and errors,
and the README's example ("Forecast across scale") run as written."""

import json
import re
import shlex
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from safetensors.numpy import save_file

from scalerl.cli import main
from scalerl.fit import FitConfig, predict_across
from scalerl.fit.curves.synthetic import size_family
from scalerl.fit.readers.sizes import (
    format_size,
    model_parameters,
    parse_size,
    size_in_name,
    size_of_run,
)

FAST = ["--bootstrap", "0"]
README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.mark.parametrize("text, value", [("0.6B", 0.6e9), ("1.7b", 1.7e9), ("600M", 6e8),
                                         ("8k", 8e3), ("14336", 14336.0), ("1.5e9", 1.5e9),
                                         ("2T", 2e12), (" 3 B ", 3e9)])
def test_parse_size(text, value):
    assert parse_size(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["tiny-m", "0", "-1B", "1.5X", "", "B"])
def test_parse_size_rejects(text):
    assert parse_size(text) is None


@pytest.mark.parametrize("name, value", [
    ("Qwen3-0.6B-Base", 0.6e9), ("qwen3-1.7b", 1.7e9), ("Qwen2.5-Math-1.5B", 1.5e9),
    ("llama_8b_run", 8e9), ("14B", 14e9), ("tiny-m", None), ("llama-8b-1m", None),
    ("tiny-m_L80_scalerl_b16x8_s0", None), ("val-gsm8k-mean", None)])
def test_size_in_name(name, value):
    assert size_in_name(name) == (None if value is None else pytest.approx(value))


def test_size_of_run_prefers_the_given_sizes():
    sizes = {"tiny-m": 1.06e6, "a": 5.0}
    assert size_of_run(["tiny-m_L80_s0", "tiny-m"], sizes) == 1.06e6  # by its model column
    assert size_of_run(["a/seed=1"], sizes) == 5.0  # NAME=INPUT with sub-runs
    assert size_of_run(["Qwen3-4B-Base"], sizes) == 4e9  # from the name
    assert size_of_run(["run"], sizes) is None
    assert format_size(1.062912e6) == "1.06M" and format_size(14e9) == "14B"


def test_model_parameters_from_base_info_and_safetensors(tmp_path):
    tiny = tmp_path / "tiny" / "base"
    tiny.mkdir(parents=True)
    (tiny / "base_info.json").write_text(json.dumps({"model": "tiny-m", "parameters": 1062912}))
    assert model_parameters(tiny) == 1062912
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "base_info.json").write_text(json.dumps({"model": "x", "kind": "hf"}))  # no count
    save_file({"embed.weight": np.zeros((10, 4), np.float32),
               "layer.weight": np.zeros((4, 4), np.float16)}, str(hf / "model-1.safetensors"),
              metadata={"format": "pt"})
    save_file({"norm.weight": np.zeros(4, np.float32)}, str(hf / "model-2.safetensors"))
    assert model_parameters(hf) == 10 * 4 + 4 * 4 + 4
    (hf / "config.json").write_text("{}")
    assert model_parameters(hf / "config.json") == 60  # a file: its directory
    with pytest.raises(Exception, match="no parameter count found"):
        model_parameters(tmp_path)


def _write_family(folder, fam, k, names=None):
    """The first k runs of `fam` as step,pass_rate CSVs; NAME=PATH specs (names: sizes)."""
    folder.mkdir(parents=True, exist_ok=True)
    specs = []
    for i in range(k):
        name = (names or [format_size(s) for s in fam.sizes])[i]
        path = folder / f"run{i}.csv"
        pd.DataFrame({"step": fam.compute, "pass_rate": fam.reward[i]}).to_csv(path,
                                                                              index=False)
        specs.append(f"{name}={path}")
    return specs


def test_forecast_of_the_largest_size_from_csvs(tmp_path, capsys):
    fam = size_family(11)  # sizes 0.5B, 1.5B, 3B, 7B, 14B; compute = step
    specs = _write_family(tmp_path, fam, 4)
    out = tmp_path / "across.json"
    argv = ["across", *specs, "--target-size", "14B", "--final-step", str(fam.compute[-1]),
            "--target-r0", str(fam.R0[4]), "--out", str(out), *FAST]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    direct = predict_across(fam.runs(4), 14e9, fam.compute[-1], fam.R0[4],
                            FitConfig(bootstrap_n=0))
    assert direct.status == "ok"
    saved = json.loads(out.read_text())
    assert saved["axis"] == "size" and saved["compute_col"] == "step"
    p = saved["tasks"]["pass_rate"]["prediction"]
    assert saved["tasks"]["pass_rate"]["runs"] == ["500M", "1.5B", "3B", "7B"]
    assert p["status"] == "ok"
    for key in ("predicted_final", "observed_final_lo", "observed_final_hi", "A", "A_lo",
                "A_hi", "C_mid"):
        assert p[key] == pytest.approx(getattr(direct, key), abs=1e-9), key
    assert f"predicted final {direct.predicted_final:.3f}" in printed
    assert f"[{direct.observed_final_lo:.3f}, {direct.observed_final_hi:.3f}]" in printed
    assert "status ok" in printed and "R0 " in printed and "(given)" in printed
    rows = [line.split() for line in printed.splitlines() if line.strip().startswith("500M")]
    assert rows and rows[0][1] == "500M" and "A," in rows[0]  # the per-run estimates


def test_two_sizes_are_refused_with_the_reason(tmp_path, capsys):
    fam = size_family(12)
    specs = _write_family(tmp_path, fam, 2)
    out = tmp_path / "across.json"
    argv = ["across", *specs, "--target-size", "14B", "--final-step", str(fam.compute[-1]),
            "--out", str(out), *FAST]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    # two sizes can never give a law of three; here the 500M run's A also sits on its range's
    # end, which the per-run table says
    assert "no forecast (few_sizes): the A law has 1 distinct model size(s) to fit, it needs 3" \
        in printed
    assert "A sits within a grid step of the end of its range" in printed
    p = json.loads(out.read_text())["tasks"]["pass_rate"]["prediction"]
    assert p["status"] == "few_sizes" and p["predicted_final"] is None and p["A"] is None


def test_scalerl_evals_labelled_by_model_directories(tmp_path, capsys, make_eval_frame):
    # per-sample eval Parquet (run, model, gen_len columns) of three models, the sizes read
    # from their base directories, the compute axis in FLOPs (so --final-step is refused)
    specs, sizes = [], []
    for i, (model, params, a) in enumerate([("tiny-s", 1e5, 0.35), ("tiny-m", 1e6, 0.45),
                                            ("tiny-l", 1e7, 0.55)]):
        base = tmp_path / "models" / model / "base"
        base.mkdir(parents=True)
        (base / "base_info.json").write_text(json.dumps({"parameters": params}))
        sizes += ["--size", f"{model}={base}"]
        frame = make_eval_frame(run=f"{model}_L64_s0", model=model, a=a, c_mid=3.0 + i, chunks=10)
        path = tmp_path / "evals" / model / "chunks.parquet"
        path.parent.mkdir(parents=True)
        frame.to_parquet(path)
        specs.append(str(path.parent))
    argv = ["across", *specs, *sizes, "--compute-col", "compute_device_hours",
            "--target-size", "1e8", *FAST]
    assert main([*argv, "--final-compute", "9"]) == 0
    printed = capsys.readouterr().out
    assert "math: model size 100M to 9 compute_device_hours" in printed
    assert "tiny-s_L64_s0 (100k), tiny-m_L64_s0 (1M), tiny-l_L64_s0 (10M)" in printed
    assert main([*argv, "--final-step", "90"]) == 2
    assert "--final-step needs the step as the compute axis" in capsys.readouterr().err


def test_generation_length_axis_reads_the_gen_len_column(tmp_path, capsys):
    fam = size_family(13, sizes=(2048, 4096, 8192, 16384), reference=2048,
                      scatter=(0.0, 0.0, 0.0), n_eval=20000)
    specs = []
    for i, length in enumerate(fam.sizes[:3]):
        path = tmp_path / f"len{i}.csv"
        pd.DataFrame({"step": fam.compute, "pass_rate": fam.reward[i],
                      "gen_len": int(length)}).to_csv(path, index=False)
        specs.append(f"run{i}={path}")
    out = tmp_path / "across.json"
    assert main(["across", *specs, "--axis", "gen_len", "--target-len", "16384",
                 "--final-compute", str(fam.compute[-1]), "--target-r0", str(fam.R0[3]),
                 "--out", str(out), *FAST]) == 0
    assert "generation length 16.4k" in capsys.readouterr().out
    p = json.loads(out.read_text())["tasks"]["pass_rate"]["prediction"]
    direct = predict_across(fam.runs(3), 16384, fam.compute[-1], fam.R0[3],
                            FitConfig(bootstrap_n=0), axis="gen_len")
    assert p["status"] == direct.status == "ok"
    assert p["A"] == pytest.approx(direct.A, abs=1e-9)
    assert p["A"] == pytest.approx(fam.A[3], abs=0.01)


@pytest.mark.parametrize("extra, message", [
    (["--target-r0", "code=0.3"], "no task 'code' in the runs"),
    (["--target-r0", "high"], "expected a number or TASK=NUMBER"),
    (["--size", "nothing"], "expected NAME=SIZE or NAME=MODEL_DIR"),
    (["--r0", "0.2"], None),  # not offered: each run's base is its own
])
def test_bad_options_name_the_problem(tmp_path, capsys, extra, message):
    fam = size_family(14)
    specs = _write_family(tmp_path, fam, 3)
    argv = ["across", *specs, "--target-size", "14B", "--final-step", "10", *FAST, *extra]
    if message is None:
        with pytest.raises(SystemExit):
            main(argv)
        assert "unrecognized arguments: --r0" in capsys.readouterr().err
        return
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_runs_without_a_size_are_named(tmp_path, capsys):
    fam = size_family(15)
    specs = _write_family(tmp_path, fam, 3, names=["small", "0.5B", "medium"])
    assert main(["across", *specs, "--target-size", "14B", "--final-step", "10", *FAST]) == 2
    err = capsys.readouterr().err
    assert "no size for run(s) medium, small" in err and "--size NAME=SIZE" in err


NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def _same(shown: str, printed: str) -> bool:
    """The same text, numbers equal to the printed precision (one unit in the last digit)."""
    if NUMBER.sub("#", shown) != NUMBER.sub("#", printed):
        return False
    for a, b in zip(NUMBER.findall(shown), NUMBER.findall(printed)):
        digits = len(a.split(".")[1].split("e")[0]) if "." in a else 0
        if abs(float(a) - float(b)) > 1.01 * 10 ** -digits * max(1.0, abs(float(a)) / 10):
            return False
    return True


def test_readme_example_runs_and_prints_what_it_shows(monkeypatch, capsys):
    text = README.read_text()
    start = text.index("## Forecast across scale")
    section = text[start:text.index("\n## ", start + 10)]
    command = re.search(r"```bash\n(.*?)```", section, flags=re.S).group(1)
    argv = shlex.split(command.replace("\\\n", " "))
    assert argv[0] == "scalerl"
    monkeypatch.chdir(README.parent)
    assert main(argv[1:]) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    shown = re.search(r"```text\n(.*?)```", section, flags=re.S).group(1).strip().splitlines()
    assert len(printed) == len(shown)
    for a, b in zip(shown, printed):
        assert _same(a, b), f"README shows\n{a}\nprinted\n{b}"
