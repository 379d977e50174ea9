# Stage 4: evaluation of every checkpoint on the held-out split (chunk 0 = the base model, which
# gives R0), plus optional downstream sets. One Parquet file per checkpoint (scalerl.eval.schema).


rule eval:
    input:
        cfg=run_dir("{run}", "run.yaml"),
        prompts=PROMPTS,
        checkpoint=lambda w: checkpoint_dir(w.run, w.chunk),
        model_cfg=lambda w: model_config_file(w.run),
    output:
        run_dir("{run}", "eval", "chunk{chunk}.parquet"),
    log:
        res("logs", "eval", "{run}", "chunk{chunk}.log"),
    benchmark:
        res("benchmarks", "eval", "{run}", "chunk{chunk}.tsv")
    threads: rule_resources("eval")["threads"]
    resources:
        **job_resources("eval"),
    conda:
        CONDA_ENV
    shell:
        "scalerl eval --config {input.cfg} --checkpoint {input.checkpoint}"
        " --model-config {input.model_cfg} --chunk {wildcards.chunk}"
        " --prompts {input.prompts} --out {output} > {log} 2>&1"


rule eval_downstream:
    input:
        cfg=run_dir("{run}", "run.yaml"),
        prompts=lambda w: SWEEP.downstream[w.dataset].path,
        checkpoint=lambda w: checkpoint_dir(w.run, w.chunk),
        model_cfg=lambda w: model_config_file(w.run),
    output:
        run_dir("{run}", "downstream", "{dataset}", "chunk{chunk}.parquet"),
    log:
        res("logs", "eval_downstream", "{run}", "{dataset}", "chunk{chunk}.log"),
    benchmark:
        res("benchmarks", "eval_downstream", "{run}", "{dataset}", "chunk{chunk}.tsv")
    params:
        max_prompts=lambda w: SWEEP.downstream[w.dataset].max_prompts,
        format=lambda w: SWEEP.downstream[w.dataset].format,
    threads: rule_resources("eval")["threads"]
    resources:
        **job_resources("eval"),
    conda:
        CONDA_ENV
    shell:
        "scalerl eval --config {input.cfg} --checkpoint {input.checkpoint}"
        " --model-config {input.model_cfg} --chunk {wildcards.chunk}"
        " --prompts {input.prompts} --split all --dataset {wildcards.dataset}"
        " --max-prompts {params.max_prompts} --format '{params.format}'"
        " --out {output} > {log} 2>&1"
