# Stage 3: training chunks. Checkpoint k (k >= 1) is trained from checkpoint k-1; checkpoint 0 is
# the base model. Each chunk is one bounded job that writes one checkpoint directory.
# `scalerl train` numbers its chunks from 0 (its chunk 0 starts from the base model), so the
# job that writes runs/RUN/chunk{k} runs trainer chunk k-1.


rule run_config:
    output:
        run_dir("{run}", "run.yaml"),
    log:
        res("logs", "run_config", "{run}.log"),
    localrule: True
    run:
        write_run_config(output[0], wildcards.run)


rule provenance:
    input:
        run_dir("{run}", "run.yaml"),
    output:
        run_dir("{run}", "provenance.json"),
    log:
        res("logs", "provenance", "{run}.log"),
    localrule: True
    run:
        write_run_provenance(output[0], input[0])


rule train:
    input:
        cfg=run_dir("{run}", "run.yaml"),
        prompts=PROMPTS,
        init=lambda w: checkpoint_dir(w.run, int(w.chunk) - 1),
        model_cfg=lambda w: model_config_file(w.run),
    output:
        checkpoint=directory(run_dir("{run}", "chunk{chunk}")),
    log:
        res("logs", "train", "{run}", "chunk{chunk}.log"),
    benchmark:
        res("benchmarks", "train", "{run}", "chunk{chunk}.tsv")
    params:
        trainer_chunk=lambda w: int(w.chunk) - 1,
    wildcard_constraints:
        chunk=r"[1-9][0-9]*",
    threads: rule_resources("train")["threads"]
    resources:
        **job_resources("train"),
    conda:
        CONDA_ENV
    shell:
        "scalerl train --config {input.cfg} --chunk {params.trainer_chunk} --init {input.init}"
        " --model-config {input.model_cfg} --prompts {input.prompts} --out {output.checkpoint}"
        " > {log} 2>&1"
