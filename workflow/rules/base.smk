# Stage 2: one base model per model name (`scalerl base`): a tiny model built and warm-started
# with SFT, or a Hugging Face model copied into a local model directory.


rule model_config:
    output:
        res("models", "{model}", "model.yaml"),
    params:
        cfg=lambda w: SWEEP.models[w.model].config,
    log:
        res("logs", "model_config", "{model}.log"),
    localrule: True
    run:
        write_yaml(output[0], params.cfg)


rule base:
    input:
        cfg=res("models", "{model}", "model.yaml"),
    output:
        model=directory(res("models", "{model}", "base")),
    log:
        res("logs", "base", "{model}.log"),
    benchmark:
        res("benchmarks", "base", "{model}.tsv")
    threads: rule_resources("base")["threads"]
    resources:
        **job_resources("base"),
    conda:
        CONDA_ENV
    shell:
        "scalerl base --config {input.cfg} --out {output.model} > {log} 2>&1"
