# Stage 3: each run's config, then its training chunks. Chunk k (k >= 1, `scalerl train --chunk
# k`) is trained from checkpoint k-1; checkpoint 0 is the base model. Each chunk is one bounded
# job that writes one checkpoint directory.


rule run_config:
    output:
        yaml=run_dir("{run}", "run.yaml"),
    log:
        res("logs", "run_config", "{run}.log"),
    localrule: True
    run:
        write_run_config(output.yaml, wildcards.run, log[0])


rule provenance:
    input:
        run_yaml=rules.run_config.output.yaml,
    output:
        json=run_dir("{run}", "provenance.json"),
    log:
        res("logs", "provenance", "{run}.log"),
    localrule: True
    run:
        write_run_provenance(output.json, input.run_yaml, log[0])


rule train:
    input:
        cfg=rules.run_config.output.yaml,
        prompts=rules.data.output.prompts,
        init=lambda w: checkpoint_dir(w.run, int(w.chunk) - 1),
        model_cfg=lambda w: model_config_file(w.run),
    output:
        checkpoint=directory(run_dir("{run}", "chunk{chunk}")),
    log:
        res("logs", "train", "{run}", "chunk{chunk}.log"),
    benchmark:
        res("benchmarks", "train", "{run}", "chunk{chunk}.tsv")
    wildcard_constraints:
        chunk=r"[1-9][0-9]*",
    threads: threads_of("train")
    resources:
        **job_resources("train"),
    conda:
        CONDA_ENV
    shell:
        "scalerl train --config {input.cfg} --chunk {wildcards.chunk} --init {input.init}"
        " --model-config {input.model_cfg} --prompts {input.prompts} --out {output.checkpoint}"
        " > {log} 2>&1"
