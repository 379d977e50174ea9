"""Helpers of the workflow tests: run snakemake on this repository's Snakefile, read job counts."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SNAKEFILE = REPO / "workflow" / "Snakefile"


def snakemake(workdir, *args, cores=1, timeout=180, env=None):
    """`python -m snakemake` on the repo's Snakefile in `workdir`; the CompletedProcess.

    The tests state every option they rely on: no workflow profile unless `args` names one."""
    profile = () if "--workflow-profile" in args else ("--workflow-profile", "none")
    cmd = [sys.executable, "-m", "snakemake", "-s", str(SNAKEFILE), "--directory", str(workdir),
           "--cores", str(cores), *profile, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def job_counts(stdout):
    """{rule: count} from the 'Job stats' table snakemake prints."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Job stats"))
    counts = {}
    for line in lines[start + 3:]:
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            break
        counts[parts[0]] = int(parts[1])
    return counts
