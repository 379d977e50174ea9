# Stage 4: evaluation of every checkpoint on the held-out split (chunk 0 = the base model, which
# gives R0), plus optional downstream sets. One Parquet file per checkpoint (scalerl.eval.schema).


rule eval:
    input:
        cfg=rules.run_config.output.yaml,
        prompts=rules.data.output.prompts,
        checkpoint=lambda w: checkpoint_dir(w.run, w.chunk),
        model_cfg=lambda w: model_config_file(w.run),
    output:
        table=run_dir("{run}", "eval", "chunk{chunk}.parquet"),
    log:
        res("logs", "eval", "{run}", "chunk{chunk}.log"),
    benchmark:
        res("benchmarks", "eval", "{run}", "chunk{chunk}.tsv")
    params:
        downstream="",
    threads: threads_of("eval")
    resources:
        **job_resources("eval"),
    conda:
        CONDA_ENV
    shell:
        "scalerl eval --config {input.cfg} --checkpoint {input.checkpoint}"
        " --model-config {input.model_cfg} --chunk {wildcards.chunk}"
        " --prompts {input.prompts} {params.downstream} --out {output.table} > {log} 2>&1"


use rule eval as eval_downstream with:
    input:
        cfg=rules.run_config.output.yaml,
        prompts=lambda w: SWEEP.downstream[w.dataset].path,
        checkpoint=lambda w: checkpoint_dir(w.run, w.chunk),
        model_cfg=lambda w: model_config_file(w.run),
    output:
        table=run_dir("{run}", "downstream", "{dataset}", "chunk{chunk}.parquet"),
    log:
        res("logs", "eval_downstream", "{run}", "{dataset}", "chunk{chunk}.log"),
    benchmark:
        res("benchmarks", "eval_downstream", "{run}", "{dataset}", "chunk{chunk}.tsv")
    params:
        downstream=lambda w: options(
            [
                "--split",
                "all",
                "--dataset",
                w.dataset,
                "--max-prompts",
                str(SWEEP.downstream[w.dataset].max_prompts),
                "--format",
                SWEEP.downstream[w.dataset].format,
            ]
        ),
