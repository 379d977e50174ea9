# scalerl workflow entry point: config, validation, stage includes, rule all.
# The stages live in workflow/rules/*.smk; helpers only in workflow/rules/common.smk.
# Default: the embedded CPU sweep (config/config.yaml). Another sweep: --configfile FILE
# (it replaces the default file instead of being merged into it).
import os

from snakemake.utils import min_version

min_version("9.0")


if not workflow.config_settings.configfiles:

    configfile: os.path.join(workflow.basedir, "config", "config.yaml")


# Jobs run `scalerl` from the PATH that common.smk extends with this interpreter's bin/.
envvars:
    "PATH",


# Validation (the JSON schema for results_dir and resources, then scalerl.sweep for the rest)
# happens in common.smk, which raises a WorkflowError naming every bad key before any job.
include: "workflow/rules/common.smk"


wildcard_constraints:
    run=r"[A-Za-z0-9][A-Za-z0-9._-]*",
    model=r"[A-Za-z0-9][A-Za-z0-9.-]*",
    dataset=r"[A-Za-z0-9][A-Za-z0-9.-]*",
    chunk=r"[0-9]+",


include: "workflow/rules/data.smk"
include: "workflow/rules/base.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/eval.smk"
include: "workflow/rules/fit.smk"


rule all:
    input:
        all_outputs(),
    default_target: True
