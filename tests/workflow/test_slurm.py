"""The tiny sweep of test_end_to_end.py through profiles/slurm on a real SLURM cluster.

Needs `sbatch` and a cluster that answers `sinfo`; as root it starts the one-node cluster of
.ci/slurm_up.sh when none answers. Skipped otherwise, unless SCALERL_REQUIRE_SLURM=1 (.ci/run
sets it), where it fails instead.
1. the profile, with what this one CPU node cannot give scaled down (GPUs -> 0; executor and
   squeue status unchanged), runs the whole sweep; every output passes the checks of the
   local end-to-end test;
2. every non-local job went through sbatch: the snakemake log's SLURM job ids are exactly the
   ids of the jobs' SLURM logs, one per job; the train jobs' sbatch calls carry the config's
   one-node request (no GPUs, its threads); squeue shows the last job (report) COMPLETED;
3. a 2-node train request in the sweep config's `resources.train` (what
   config/layout-2node-16gpu.yaml sets: nodes 2, 8 GPUs and 64 cores per node) reaches sbatch
   as `scalerl.sweep.job_resources` translates it (this cluster has one node and no GPUs, so
   sbatch refuses it, and the refusal quotes the call).
Leaves out: the train rule's multi-node `srun torchrun` launch itself (needs 2 GPU nodes).
"""

import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml
from snakemake_run import REPO, SNAKEFILE
from test_end_to_end import RUN, check_sweep_outputs
from test_end_to_end import _config as tiny_config

PROFILE = REPO / "profiles" / "slurm" / "config.yaml"
SLURM_UP = REPO / ".ci" / "slurm_up.sh"
REQUIRE = os.environ.get("SCALERL_REQUIRE_SLURM") == "1"
READY = {"idle", "mixed", "allocated", "completing"}
# rules that run as SLURM jobs, and their job count in the tiny sweep (the others are local)
SLURM_JOBS = {"data": 1, "base": 1, "train": 4, "eval": 5, "eval_downstream": 1, "fit": 1,
              "predictions": 1, "report": 1}


def _unavailable(reason):
    if REQUIRE:
        pytest.fail(f"SCALERL_REQUIRE_SLURM=1 but {reason} (run .ci/slurm_up.sh as root)")
    pytest.skip(reason)


def _node_states():
    try:
        out = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], capture_output=True, text=True,
                             timeout=20)
    except subprocess.TimeoutExpired:
        return set()
    return set(out.stdout.split()) if out.returncode == 0 else set()


def _ensure_cluster():
    """A SLURM cluster answering with a usable node; its CPUs per node."""
    if shutil.which("sbatch") is None:
        _unavailable("sbatch is not installed")
    if not _node_states() & READY:
        if os.geteuid() != 0:
            _unavailable("no SLURM node is up, and only root can start one (.ci/slurm_up.sh)")
        up = subprocess.run(["bash", str(SLURM_UP)], capture_output=True, text=True, timeout=600)
        assert up.returncode == 0, f".ci/slurm_up.sh failed:\n{up.stdout}\n{up.stderr}"
        assert _node_states() & READY, f"no usable node after .ci/slurm_up.sh: {_node_states()}"
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%c"], capture_output=True, text=True,
                         timeout=20, check=True)
    return min(int(c) for c in out.stdout.split())


def _fit_to_node(profile, cpus):
    """`profile` with every request one CPU node cannot give scaled down to it."""
    profile = dict(profile)
    scaled = {}
    for rule, resources in profile["set-resources"].items():
        resources = dict(resources)
        resources.pop("gres", None)
        resources.pop("gpu_model", None)
        if "gpu" in resources:
            resources["gpu"] = 0
        scaled[rule] = resources
    profile["set-resources"] = scaled
    profile["slurm-init-seconds-before-status-checks"] = 2  # tiny jobs: poll soon
    profile["slurm-keep-successful-logs"] = True  # step 2 counts the jobs' SLURM logs
    return profile


def _snakemake(workdir, profile_dir, *args, log_name, timeout, layout=None):
    configs = [str(tiny_config(workdir))] + ([str(layout)] if layout else [])
    cmd = [sys.executable, "-m", "snakemake", "-s", str(SNAKEFILE), "--directory", str(workdir),
           "--configfile", *configs, "--workflow-profile", str(profile_dir), *args]
    log = workdir / log_name
    with open(log, "w") as out:
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=timeout,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
    return proc.returncode, log.read_text()


def _sbatch_calls(log, rule):
    """The sbatch command lines that the --verbose snakemake log shows for `rule`'s jobs."""
    calls = [line.split("sbatch call: ", 1)[1] for line in log.splitlines()
             if "sbatch call: " in line]
    return [call for call in calls if f"--comment rule_{rule}_wildcards" in call]


@pytest.mark.slow
def test_tiny_sweep_on_slurm(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is needed for the provenance record")
    cpus = _ensure_cluster()
    profile = yaml.safe_load(PROFILE.read_text())
    assert profile["executor"] == "slurm" and profile["slurm-status-command"] == "squeue"
    scaled_dir = tmp_path / "profile"
    scaled_dir.mkdir()
    scaled = _fit_to_node(profile, cpus)
    (scaled_dir / "config.yaml").write_text(yaml.safe_dump(scaled))

    # -- 1. the sweep through SLURM -----------------------------------------------------------
    code, log = _snakemake(tmp_path, scaled_dir, "--verbose", log_name="slurm_run.log",
                           timeout=1800)
    assert code == 0, log[-6000:]
    check_sweep_outputs(tmp_path)

    # -- 2. every job was an sbatch job -------------------------------------------------------
    submitted = dict(re.findall(r"Job (\d+) has been submitted with SLURM jobid (\d+)", log))
    assert len(submitted) == sum(SLURM_JOBS.values()), submitted
    slurm_logs = tmp_path / ".snakemake" / "slurm_logs"
    per_rule = {rule: sorted(p.stem for p in (slurm_logs / f"rule_{rule}").rglob("*.log"))
                for rule in SLURM_JOBS}
    assert {rule: len(ids) for rule, ids in per_rule.items()} == SLURM_JOBS
    assert sorted(sum(per_rule.values(), [])) == sorted(submitted.values())

    train_calls = _sbatch_calls(log, "train")
    assert len(train_calls) == SLURM_JOBS["train"], train_calls
    threads = yaml.safe_load(tiny_config(tmp_path).read_text()).get(
        "resources", {}).get("train", {}).get("threads", 1)
    for call in train_calls:
        assert f"--cpus-per-task={threads}" in call and "--nodes=" not in call
        assert "--gres" not in call and "--gpus" not in call

    report_id = per_rule["report"][0]
    queue = subprocess.run(["squeue", "--states=all", "-h", "-j", report_id, "-o", "%T|%k"],
                           capture_output=True, text=True, timeout=20)
    assert queue.stdout.strip().startswith("COMPLETED|rule_report"), queue.stdout + queue.stderr

    # -- 3. a 2-node train request (the 2-node layout's resources) ---------------------------
    chunk4 = f"results/runs/{RUN}/chunk4"
    shipped = yaml.safe_load((REPO / "config" / "layout-2node-16gpu.yaml").read_text())
    request = shipped["resources"]["train"]
    layout = tmp_path / "two_nodes.yaml"
    layout.write_text(yaml.safe_dump({"resources": {"train": request}}))
    code, log = _snakemake(tmp_path, PROFILE.parent, "--forcerun", chunk4, "--retries", "0",
                           "--slurm-init-seconds-before-status-checks", "2",
                           log_name="multinode_request.log", timeout=300, layout=layout)
    assert code != 0 and "SLURM sbatch failed" in log, log[-4000:]
    calls = [line.strip() for line in log.splitlines()
             if line.strip().startswith("sbatch --parsable ")]
    assert calls and all("--comment rule_train_" in c for c in calls), log[-4000:]
    for flag in (f"--nodes={request['nodes']}", f"--gres=gpu:{request['gpu']}",
                 f"--ntasks={request['nodes']}", f"--cpus-per-task={request['threads']}"):
        assert flag in calls[0], (flag, calls[0])
    assert "--ntasks-per-gpu" not in calls[0] and "--gpus=" not in calls[0]
