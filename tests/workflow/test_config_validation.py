"""The workflow's config handling: dry runs of the shipped configs, bad configs fail early.

Each test runs `python -m snakemake` in a temporary working directory (never in the repo), so
a dry run leaves nothing behind here. A bad config must fail before any job with a message
that names the offending key.
"""

import copy

import pytest
import yaml
from snakemake_run import REPO, SNAKEFILE, job_counts, snakemake


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
    out = snakemake(tmp_path, "-n", "-p", "--configfile", str(REPO / "config" / "gpu.yaml"))
    assert out.returncode == 0, out.stderr + out.stdout
    counts = job_counts(out.stdout)
    assert counts["base"] == 2 and counts["report"] == 1
    assert "qwen3-1.7b_L" in out.stdout and "scalerl train" in out.stdout
    # GPU stages declare a GPU; the CPU-only stages do not.
    for rule in ("train", "eval", "base"):
        block = out.stdout.split(f"rule {rule}:", 1)[1].split("Shell command", 1)[0]
        assert "gpu=1" in block, rule


def _train_block(tmp_path, *configs):
    out = snakemake(tmp_path, "-n", "--workflow-profile", str(REPO / "profiles" / "slurm"),
                    "--configfile", *(str(REPO / "config" / c) for c in configs))
    assert out.returncode == 0, out.stderr + out.stdout
    eval_block = out.stdout.split("rule eval:", 1)[1].split("Shell command", 1)[0]
    assert "gpu=1" in eval_block
    return out.stdout.split("rule train:", 1)[1].split("Shell command", 1)[0]


def test_slurm_profile_dry_run(tmp_path):
    """A train job asks for what the config's resources.train says: gpu.yaml one GPU; the
    one-node layout 8 GPUs as one task; the 2-node layout 2 nodes x 8 GPUs (per-node gres),
    one srun task per node."""
    block = _train_block(tmp_path, "gpu.yaml")
    assert "runtime=" in block and "mem_mb=" in block and "gpu=1" in block
    assert "nodes=" not in block and "mpi=" not in block
    block = _train_block(tmp_path, "gpu.yaml", "layout-1node-8gpu.yaml")
    assert "tasks_per_gpu=0" in block and "nodes=" not in block
    block = _train_block(tmp_path, "gpu.yaml", "layout-2node-16gpu.yaml")
    for resource in ("nodes=2", "gpu=0", "gres=gpu:8", "tasks=2", "tasks_per_gpu=0", "mpi=srun"):
        assert resource in block, resource


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
        (lambda c: c["train"].update(chunks="four"), "train.chunks: 'four' is not an integer"),
        (lambda c: c["sweep"].update(models=[]), "sweep.models: must list at least one"),
        (lambda c: c["train"].update(chunks=6, steps_per_chunk=[3, 3, 6]),
         "train.steps_per_chunk lists 3 chunk length(s) but train.chunks is 6"),
        (lambda c: c["train"].update(steps_per_chunk=[3, 0]), "train.steps_per_chunk: [3, 0]"
         " is not valid: optimizer steps per chunk"),
        (lambda c: c["sweep"].update(models=["tiny-xl"]), "'tiny-xl' is not defined under"),
        (lambda c: c["sweep"].update(recipes=["nope"]), "'nope' is neither defined"),
        (lambda c: c["sweep"].update(batches=["16by8"]), "sweep.batches.0: '16by8' is not"),
        (lambda c: c["eval"].update(samples_per_prompt=0), "samples_per_prompt = 0 must be >= 1"),
        (lambda c: c["resources"]["train"].update(threads=0), "threads"),
        (lambda c: c["train"]["recipe_overrides"].update(loss={"eps_high": 5}),
         "kind = 'cispo' does not read loss.eps_high"),
        (lambda c: c["train"].update(recipe={"max_lag": 3}), "train.recipe is set by the sweep"),
        (lambda c: c["recipes"]["scalerl"]["overrides"].update(loss={"kindd": "x"}),
         "recipes.scalerl"),
        (lambda c: c["models"]["tiny-m"].update(recipe_overrides={"optimizer": {"lrr": 1}}),
         "models.tiny-m.recipe_overrides"),
        (lambda c: c["models"]["tiny-s"].update(recipe_overrides={"think_budget": [4, 8]}),
         "models.tiny-s.recipe_overrides: think_budget are set by the sweep"),
        (lambda c: c["train"].update(bogus=1), "unknown key train.bogus"),
    ],
)
def test_bad_config_fails_before_any_job(tmp_path, mutate, expected):
    out = _bad(tmp_path, mutate)
    text = out.stdout + out.stderr
    assert out.returncode != 0
    assert "invalid config" in text
    assert expected in text, text
    assert not (tmp_path / "results").exists()


def test_model_recipe_overrides_reach_only_that_models_runs(tmp_path):
    # the default config with a shared RL lr and a different one for tiny-m only
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    shared_lr, model_lr = 1.0e-4, 7.0e-5
    cfg["train"]["recipe_overrides"]["optimizer"]["lr"] = shared_lr
    cfg["models"]["tiny-m"]["recipe_overrides"] = {"optimizer": {"lr": model_lr}}
    path = tmp_path / "lr.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = snakemake(tmp_path, "--until", "run_config", "--configfile", str(path))
    assert out.returncode == 0, out.stderr
    runs = sorted((tmp_path / "results" / "runs").glob("*/run.yaml"))
    assert len(runs) == 4
    for path in runs:
        optimizer = yaml.safe_load(path.read_text())["recipe"]["optimizer"]
        expected = model_lr if path.parent.name.startswith("tiny-m_") else shared_lr
        assert optimizer["lr"] == expected, path
        assert optimizer["eps"] == cfg["train"]["recipe_overrides"]["optimizer"]["eps"]


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


def test_lint_is_clean(tmp_path):
    out = snakemake(tmp_path, "--lint")
    text = out.stdout + out.stderr
    problems = [line.strip() for line in text.splitlines() if line.strip().startswith("* ")]
    assert out.returncode == 0 and not problems, text[-3000:]
    assert "Congratulations, your workflow is in a good condition!" in text


def test_job_config_rules_run_locally(tmp_path):
    """The rules that only write a small file from the sweep config (and the `use rule` copy of
    one, which does not inherit `localrule`) run in the main process, never as cluster jobs:
    tests/workflow/test_slurm.py counts the sbatch jobs of the others."""
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings

    with SnakemakeApi(OutputSettings(quiet={"all"})) as api:
        wf = api.workflow(snakefile=SNAKEFILE, workdir=tmp_path,
                          resource_settings=ResourceSettings(), config_settings=ConfigSettings(
                              configfiles=[REPO / "config" / "config.yaml"]))
        workflow = wf._workflow  # the API exposes no per-rule "local" flag
        local = {rule.name for rule in workflow.rules
                 if rule.name in workflow._localrules or rule.norun}
    assert local == {"all", "data_config", "model_config", "run_config", "provenance"}
