# Stage 2: one base model per model name (`scalerl base`): a tiny model built and warm-started
# with SFT, or a Hugging Face model copied into a local model directory.


use rule data_config as model_config with:
    output:
        yaml=res("models", "{model}", "model.yaml"),
    params:
        cfg=lambda w: SWEEP.models[w.model].config,
    log:
        res("logs", "model_config", "{model}.log"),
    localrule: True


rule base:
    input:
        cfg=rules.model_config.output.yaml,
    output:
        model=directory(res("models", "{model}", "base")),
    log:
        res("logs", "base", "{model}.log"),
    benchmark:
        res("benchmarks", "base", "{model}.tsv")
    threads: threads_of("base")
    resources:
        **job_resources("base"),
    conda:
        CONDA_ENV
    shell:
        "scalerl base --config {input.cfg} --out {output.model} > {log} 2>&1"
