"""The workflow's config handling: dry runs of the shipped configs, bad configs fail early.

Each test runs `python -m snakemake` in a temporary working directory (never in the repo), so
a dry run leaves nothing behind here. A bad config must fail before any job with a message
that names the offending key.
"""

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SNAKEFILE = REPO / "Snakefile"


def snakemake(workdir, *args, timeout=180):
    cmd = [sys.executable, "-m", "snakemake", "-s", str(SNAKEFILE), "--directory", str(workdir),
           "--cores", "1", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def job_counts(stdout):
    """{rule: count} from the 'Job stats' table of a dry run."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Job stats"))
    counts = {}
    for line in lines[start + 3:]:
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            break
        counts[parts[0]] = int(parts[1])
    return counts


def test_default_config_dry_run(tmp_path):
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    out = snakemake(tmp_path, "-n")
    assert out.returncode == 0, out.stderr + out.stdout
    counts = job_counts(out.stdout)
    n_runs = 1
    for dim in ("models", "gen_lens", "recipes", "batches", "seeds", "mixes"):
        n_runs *= len(cfg["sweep"].get(dim, [None]))
    chunks = cfg["train"]["chunks"]
    assert len(cfg["sweep"]["models"]) >= 2 and len(cfg["sweep"]["gen_lens"]) >= 2
    assert counts["train"] == n_runs * chunks
    assert counts["eval"] == n_runs * (chunks + 1)  # chunk 0 = the base model
    assert counts["fit"] == n_runs and counts["report"] == 1
    assert counts["base"] == len(cfg["sweep"]["models"]) and counts["data"] == 1
    assert "tiny-m_L56_scalerl_b16x8_s0" in out.stdout
    assert not (tmp_path / "results").exists()  # a dry run writes no outputs


def test_gpu_config_dry_run_without_network(tmp_path):
    out = snakemake(tmp_path, "-n", "--configfile", str(REPO / "config" / "gpu.yaml"))
    assert out.returncode == 0, out.stderr + out.stdout
    counts = job_counts(out.stdout)
    assert counts["base"] == 2 and counts["report"] == 1
    assert "qwen3-1.7b_L" in out.stdout and "scalerl train" in out.stdout
    # GPU stages declare a GPU; the CPU-only stages do not.
    for rule in ("train", "eval", "base"):
        block = out.stdout.split(f"rule {rule}:", 1)[1].split("Shell command", 1)[0]
        assert "gpu=1" in block, rule


def test_slurm_profile_dry_run(tmp_path):
    out = snakemake(tmp_path, "-n", "--workflow-profile", str(REPO / "profiles" / "slurm"),
                    "--configfile", str(REPO / "config" / "gpu.yaml"))
    assert out.returncode == 0, out.stderr + out.stdout
    block = out.stdout.split("rule train:", 1)[1].split("Shell command", 1)[0]
    assert "gpu=1" in block and "runtime=" in block and "mem_mb=" in block


def _bad(tmp_path, mutate):
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    mutate(cfg)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return snakemake(tmp_path, "-n", "--configfile", str(path))


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda c: c["train"].update(chunkz=3), "unknown key train.chunkz"),
        (lambda c: c.update(extra_section={}), "unknown key extra_section"),
        (lambda c: c["train"].update(chunks="four"), "train.chunks: 'four' is not of type"),
        (lambda c: c["sweep"].update(models=[]), "sweep.models: must list at least one"),
        (lambda c: c["sweep"].update(models=["tiny-xl"]), "'tiny-xl' is not defined under"),
        (lambda c: c["sweep"].update(recipes=["nope"]), "'nope' is neither defined"),
        (lambda c: c["sweep"].update(batches=["16by8"]), "sweep.batches.0"),
        (lambda c: c["recipes"]["scalerl"]["overrides"].update(loss={"kindd": "x"}),
         "recipes.scalerl"),
        (lambda c: c["train"]["run_overrides"].update(bogus=1)
         if "run_overrides" in c["train"] else c["train"].update(run_overrides={"bogus": 1}),
         "bogus"),
    ],
)
def test_bad_config_fails_before_any_job(tmp_path, mutate, expected):
    out = _bad(tmp_path, mutate)
    text = out.stdout + out.stderr
    assert out.returncode != 0
    assert "invalid config" in text
    assert expected in text, text
    assert not (tmp_path / "results").exists()


def test_configfile_replaces_the_default_instead_of_merging(tmp_path):
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    small = copy.deepcopy(cfg)
    small["models"] = {"only": cfg["models"][cfg["sweep"]["models"][0]]}
    small["sweep"]["models"] = ["only"]
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(small))
    out = snakemake(tmp_path, "-n", "--configfile", str(path))
    assert out.returncode == 0, out.stderr
    assert job_counts(out.stdout)["base"] == 1


def test_lint_reports_only_the_missing_conda_envs(tmp_path):
    out = snakemake(tmp_path, "--lint")
    text = out.stdout + out.stderr
    problems = [line.strip() for line in text.splitlines() if line.strip().startswith("* ")]
    assert problems, "expected the conda-environment lint (see config/README.md)"
    assert all(p.startswith("* Specify a conda environment") for p in problems), problems
