# Stage 1: the prompt set shared by every run (`scalerl data`): train/val splits of math + code.
# data_config writes a job config from the sweep (base.smk's model_config is the same rule).


rule data_config:
    output:
        yaml=res("data", "data.yaml"),
    params:
        cfg=SWEEP.data_config,
    log:
        res("logs", "data_config.log"),
    localrule: True
    run:
        write_config(output.yaml, params.cfg, log[0])


rule data:
    input:
        cfg=rules.data_config.output.yaml,
    output:
        prompts=res("data", "prompts.parquet"),
        report=report(
            res("data", "report.json"),
            caption="../report/data.rst",
            category="Data",
        ),
    log:
        res("logs", "data.log"),
    benchmark:
        res("benchmarks", "data.tsv")
    threads: threads_of("data")
    # Every run waits for the prompt set: run it before the base models take the cores.
    priority: 10
    resources:
        **job_resources("data"),
    conda:
        CONDA_ENV
    shell:
        "scalerl data --config {input.cfg} --out {output.prompts}"
        " --report {output.report} > {log} 2>&1"
