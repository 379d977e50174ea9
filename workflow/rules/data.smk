# Stage 1: the prompt set shared by every run (`scalerl data`): train/val splits of math + code.


rule data_config:
    output:
        res("data", "data.yaml"),
    params:
        cfg=SWEEP.data_config,
    log:
        res("logs", "data_config.log"),
    localrule: True
    run:
        write_yaml(output[0], params.cfg)


rule data:
    input:
        cfg=res("data", "data.yaml"),
    output:
        prompts=PROMPTS,
        report=report(
            res("data", "report.json"),
            caption="../report/data.rst",
            category="Data",
        ),
    log:
        res("logs", "data.log"),
    benchmark:
        res("benchmarks", "data.tsv")
    threads: rule_resources("data")["threads"]
    # Every run waits for the prompt set: run it before the base models take the cores.
    priority: 10
    resources:
        **job_resources("data"),
    conda:
        CONDA_ENV
    shell:
        "scalerl data --config {input.cfg} --out {output.prompts}"
        " --report {output.report} > {log} 2>&1"
