"""`scalerl fit` and `scalerl report` end to end through scalerl.cli.main."""

import json

import numpy as np
import pandas as pd
import pytest

from scalerl.cli import main

PNG = b"\x89PNG\r\n\x1a\n"


def _png(path):
    assert path.exists() and path.read_bytes()[:8] == PNG, path


def test_fit_point_csv(point_csv, tmp_path, capsys):
    out = tmp_path / "fit"
    rc = main(["fit", str(point_csv), "--out", str(out), "--bootstrap", "30",
               "--meta", "recipe=scalerl", "--meta", "gen_len=64"])
    assert rc == 0
    record = json.loads((out / "fit.json").read_text())
    assert record["compute_col"] == "compute" and record["reward_col"] == "pass_rate"
    assert record["A"] == pytest.approx(0.62, abs=0.02) and record["converged"]
    assert record["R0"] == pytest.approx(0.3) and record["r0_source"] == "compute-0 point"
    # a table without a run column is one run, named after its file
    assert record["meta"] == {"run": "curve", "recipe": "scalerl", "gen_len": 64}
    assert record["intervals"]["n"] == 30 and record["extrapolation"]["fraction"] == 0.5
    assert record["n_points"] == 30 and record["n_excluded"] == 1
    _png(out / "curve.png")
    assert "| A | B | C_mid |" in (out / "fits.md").read_text()
    assert len(json.loads((out / "fits.json").read_text())) == 1
    assert not (out / "curves.png").exists()  # one curve: no combined plot
    assert "A=0.6" in capsys.readouterr().err  # progress on stderr


def test_fit_per_sample_evals_grouped_then_report(write_eval, tmp_path):
    fits = tmp_path / "fits"
    paths = write_eval("r1") + write_eval("r2", gen_len=128, a=0.40)
    rc = main(["fit", *map(str, paths), "--out", str(fits), "--bootstrap", "20",
               "--compute-col", "compute_flops", "--extrapolate-fraction", "0.6"])
    assert rc == 0
    for run, a in (("r1", 0.45), ("r2", 0.40)):
        record = json.loads((fits / f"run={run}" / "fit.json").read_text())
        assert record["group"] == {"run": run} and record["meta"]["model"] == "tiny-s"
        assert record["A"] == pytest.approx(a, abs=0.01)
        assert record["R0"] == pytest.approx(0.10) and record["n_points"] == 11
        assert record["C_mid"] == pytest.approx(3e13, rel=0.05)  # 3 device-hours in FLOPs
        _png(fits / f"run={run}" / "curve.png")
    _png(fits / "curves.png")
    table = (fits / "fits.md").read_text()
    assert "| run | A |" in table and "| r1 |" in table and "| r2 |" in table

    report = tmp_path / "report"
    assert main(["report", str(fits), "--out", str(report)]) == 0
    df = pd.read_parquet(report / "scaling.parquet")
    assert len(df) == 2 and sorted(df["gen_len"]) == [64, 128]
    assert {"model", "gen_len", "recipe", "task", "A", "A_lo", "A_hi", "B", "C_mid", "r2",
            "extrap_max_abs_error", "converged"} <= set(df.columns)
    text = (report / "scaling.md").read_text()
    assert "| model | gen_len | recipe | task | A | B | C_mid |" in text
    _png(report / "curves.png")


def test_report_cells_with_seeds(write_eval, tmp_path):
    paths = write_eval("s0", seed=0) + write_eval("s1", seed=1, a=0.46)
    main(["fit", *map(str, paths), "--out", str(tmp_path / "f"), "--bootstrap", "0"])
    assert main(["report", str(tmp_path / "f"), "--out", str(tmp_path / "r"),
                 "--by", "model,gen_len"]) == 0
    text = (tmp_path / "r" / "scaling.md").read_text()
    assert "## Cells with several fits" in text and "| tiny-s | 64 | 2 |" in text


def test_unknown_column_is_a_clear_error(point_csv, tmp_path, capsys):
    rc = main(["fit", str(point_csv), "--out", str(tmp_path / "o"), "--reward-col", "acc"])
    err = capsys.readouterr().err
    assert rc == 2 and "'acc' not found; available columns: step, compute, pass_rate" in err


def test_too_few_points_is_an_error(tmp_path, capsys):
    path = tmp_path / "few.csv"
    pd.DataFrame({"compute": [0, 1, 2, 3], "pass_rate": [0.1, 0.2, 0.3, 0.35]}).to_csv(path)
    rc = main(["fit", str(path), "--out", str(tmp_path / "o")])
    assert rc == 2 and "at least 4" in capsys.readouterr().err
    assert not (tmp_path / "o" / "fit.json").exists()


def test_flat_curve_is_written_but_flagged(tmp_path):
    path = tmp_path / "flat.csv"
    rng = np.random.default_rng(0)
    pd.DataFrame({"compute": np.arange(0, 20), "pass_rate": 0.3 + rng.normal(0, 0.01, 20)}
                 ).to_csv(path, index=False)
    assert main(["fit", str(path), "--out", str(tmp_path / "o"), "--bootstrap", "0"]) == 0
    record = json.loads((tmp_path / "o" / "fit.json").read_text())
    assert record["converged"] is False and any("flat" in w for w in record["warnings"])
    assert "NO" in (tmp_path / "o" / "fits.md").read_text()


def test_one_bad_group_fails_the_command_but_keeps_the_others(tmp_path):
    rng = np.random.default_rng(0)
    c = np.arange(0, 30) * 10.0
    good = 0.2 + 0.4 / (1 + (100 / np.maximum(c, 1e-9)) ** 2) + rng.normal(0, 0.003, c.size)
    df = pd.concat([pd.DataFrame({"run": "good", "compute": c, "pass_rate": good}),
                    pd.DataFrame({"run": "bad", "compute": [0, 10, 20], "pass_rate": [.1, .2, .3]})])
    path = tmp_path / "two.csv"
    df.to_csv(path, index=False)
    rc = main(["fit", str(path), "--out", str(tmp_path / "o"), "--bootstrap", "0"])
    assert rc == 2
    assert (tmp_path / "o" / "run=good" / "fit.json").exists()
    entries = json.loads((tmp_path / "o" / "fits.json").read_text())
    assert [e.get("error") is None for e in entries] == [True, False]
    assert "could not be fitted" in (tmp_path / "o" / "fits.md").read_text()


def test_help_documents_the_layout(capsys):
    with pytest.raises(SystemExit) as info:
        main(["fit", "--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    for word in ("DIR/fit.json", "fits.md", "curves.png", "--compute-col", "--meta"):
        assert word in text


def test_paper_grid_and_options(point_csv, tmp_path):
    out = tmp_path / "o"
    assert main(["fit", str(point_csv), "--out", str(out), "--paper-grid", "--bootstrap", "0",
                 "--extrapolate-fraction", "none", "--no-power-law", "--cutoff", "500"]) == 0
    record = json.loads((out / "fit.json").read_text())
    assert record["grid"]["a_range"] == [0.45, 0.8] and record["grid"]["cmid_range"] == [100, 4e4]
    assert record["cutoff"] == 500 and record["n_excluded"] == 3  # compute 0, 200, 400
    assert record["extrapolation"] is None and record["power_law"] is None
    assert record["intervals"] is None


def test_negative_compute_is_an_error(tmp_path, capsys):
    path = tmp_path / "neg.csv"
    pd.DataFrame({"compute": [-5, 1, 2, 3, 4, 5], "pass_rate": [.1, .2, .3, .35, .4, .42]}
                 ).to_csv(path, index=False)
    assert main(["fit", str(path), "--out", str(tmp_path / "o")]) == 2
    assert "compute must be >= 0" in capsys.readouterr().err


def test_config_file_and_flag_override(point_csv, tmp_path, capsys):
    cfg = tmp_path / "fit.yaml"
    cfg.write_text("a_step: 0.01\nbootstrap_n: 0\nextrapolate_fraction: 0.4\n")
    out = tmp_path / "o"
    assert main(["fit", str(point_csv), "--out", str(out), "--config", str(cfg),
                 "--bootstrap", "5", "--extrapolate-fraction", "0.6"]) == 0
    record = json.loads((out / "fit.json").read_text())
    assert record["config"]["a_step"] == 0.01 and record["intervals"]["n"] == 5
    assert record["extrapolation"]["fraction"] == 0.6  # the flag wins over the file
    assert main(["fit", str(point_csv), "--out", str(out), "--config", str(cfg)]) == 0
    assert json.loads((out / "fit.json").read_text())["extrapolation"]["fraction"] == 0.4
    cfg.write_text("a_stepp: 0.01\n")
    assert main(["fit", str(point_csv), "--out", str(out), "--config", str(cfg)]) == 2
    assert "valid keys" in capsys.readouterr().err


def test_all_zero_curve_without_r2_is_flagged_not_a_crash(tmp_path, capsys):
    # A tiny model that never solves a task: every pass rate 0, so R² is undefined (None).
    path = tmp_path / "zero.csv"
    pd.DataFrame({"compute": [0.0, 1e9, 2e9, 3e9, 4e9], "pass_rate": [0.0] * 5}).to_csv(
        path, index=False)
    assert main(["fit", str(path), "--out", str(tmp_path / "out")]) == 0
    record = json.loads((tmp_path / "out" / "fit.json").read_text())
    assert record["converged"] is False and record["r2"] is None
    assert "R2=n/a" in capsys.readouterr().err


def test_report_order_orders_the_model_axis_and_rejects_a_malformed_value(write_eval, tmp_path,
                                                                          capsys):
    paths = write_eval("a", seed=0, model="tiny-m", a=0.40) + write_eval("b", seed=0, a=0.50)
    main(["fit", *map(str, paths), "--out", str(tmp_path / "f"), "--bootstrap", "0"])
    assert main(["report", str(tmp_path / "f"), "--out", str(tmp_path / "r"), "--by",
                 "model,gen_len", "--order", "model=tiny-s,tiny-m"]) == 0
    text = (tmp_path / "r" / "scaling.md").read_text()
    assert "### model: tiny-s < tiny-m" in text
    rc = main(["report", str(tmp_path / "f"), "--out", str(tmp_path / "r2"), "--order", "model"])
    assert rc == 2 and "--order 'model': expected AXIS=V1,V2" in capsys.readouterr().err
