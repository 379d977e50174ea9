# scalerl workflow entry point: config, schema validation, stage includes, rule all.
# The stages live in workflow/rules/*.smk; helpers only in workflow/rules/common.smk.
from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "config/config.yaml"


validate(config, "workflow/schemas/config.schema.yaml")


include: "workflow/rules/common.smk"


rule all:
    input:
        all_outputs(),
    default_target: True
