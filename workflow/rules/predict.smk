# Stage 6: predictions and racing (docs/design.md, "Fitting"). Every run gets
# predictions.parquet: after each chunk k, the final pass rate and A predicted from the evals
# up to k (`scalerl predict --all-chunks`), for the report's backtest. With sweep.racing on,
# the same prediction is made as soon as chunk k is evaluated, and the checkpoint `race`
# stops runs whose A is clearly below the best's: their later chunks are never scheduled.


rule predictions:
    input:
        cfg=run_dir("{run}", "run.yaml"),
        evals=lambda w: eval_files(w.run),
    output:
        run_dir("{run}", "predictions.parquet"),
    log:
        res("logs", "predictions", "{run}.log"),
    benchmark:
        res("benchmarks", "predictions", "{run}.tsv")
    params:
        extra=predict_args(),
    threads: rule_resources("fit")["threads"]
    resources:
        **job_resources("fit"),
    conda:
        CONDA_ENV
    shell:
        "scalerl predict --eval {input.evals} --run-config {input.cfg} --all-chunks"
        " {params.extra} --out {output} > {log} 2>&1"


rule predict_chunk:
    input:
        cfg=run_dir("{run}", "run.yaml"),
        evals=lambda w: eval_files(w.run, upto=int(w.chunk)),
    output:
        run_dir("{run}", "predict", "chunk{chunk}.parquet"),
    log:
        res("logs", "predict", "{run}", "chunk{chunk}.log"),
    params:
        extra=predict_args(),
    threads: rule_resources("fit")["threads"]
    resources:
        **job_resources("fit"),
    conda:
        CONDA_ENV
    shell:
        "scalerl predict --eval {input.evals} --run-config {input.cfg}"
        " {params.extra} --out {output} > {log} 2>&1"


checkpoint race:
    input:
        predictions=lambda w: race_inputs(int(w.chunk)),
    output:
        res("racing", "chunk{chunk}.json"),
    log:
        res("logs", "race", "chunk{chunk}.log"),
    params:
        options=race_args(),
    threads: 1
    conda:
        CONDA_ENV
    shell:
        "scalerl race --predictions {input.predictions} {params.options} --out {output}"
        " > {log} 2>&1"
