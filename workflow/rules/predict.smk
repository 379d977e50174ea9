# Stage 6: predictions and racing (docs/design.md, "Fitting"). Every run gets
# predictions.parquet: after each chunk k, the final pass rate and A predicted from the evals
# up to k (`scalerl predict --all-chunks`, the curve prior by default), fitted jointly with
# its sweep-mates' evals up to k (fit.joint: same recipe, batch and mix), for the report's
# backtest. With sweep.racing on, each run's prediction is made as soon as chunk k is
# evaluated, and the checkpoint `race` stops runs whose A is clearly below the best's: their
# later chunks are never scheduled.


rule predictions:
    input:
        cfg=rules.run_config.output.yaml,
        evals=lambda w: eval_files(w.run),
        mates=lambda w: sweep_mate_evals(w.run),
    output:
        table=run_dir("{run}", "predictions.parquet"),
    log:
        res("logs", "predictions", "{run}.log"),
    benchmark:
        res("benchmarks", "predictions", "{run}.tsv")
    params:
        options=options(sweep.predict_options(SWEEP, all_chunks=True)),
        mates=lambda w, input: " ".join(["--sweep-eval", *input.mates]) if input.mates else "",
    threads: threads_of("fit")
    resources:
        **job_resources("fit"),
    conda:
        CONDA_ENV
    shell:
        "scalerl predict --eval {input.evals} {params.mates} --run-config {input.cfg}"
        " {params.options} --out {output.table} > {log} 2>&1"


use rule predictions as predict_chunk with:
    input:
        cfg=rules.run_config.output.yaml,
        evals=lambda w: eval_files(w.run, upto=int(w.chunk)),
        mates=[],  # racing decides on each run's own forecast (docs/design.md, "Fitting")
    output:
        table=run_dir("{run}", "predict", "chunk{chunk}.parquet"),
    log:
        res("logs", "predict", "{run}", "chunk{chunk}.log"),
    benchmark:
        res("benchmarks", "predict", "{run}", "chunk{chunk}.tsv")
    params:
        options=options(sweep.predict_options(SWEEP, all_chunks=False)),
        mates="",


checkpoint race:
    input:
        predictions=lambda w: race_inputs(int(w.chunk)),
    output:
        decisions=res("racing", "chunk{chunk}.json"),
    log:
        res("logs", "race", "chunk{chunk}.log"),
    params:
        options=options(sweep.race_options(SWEEP, RUNS.values())),
    threads: 1
    conda:
        CONDA_ENV
    shell:
        "scalerl race --predictions {input.predictions} {params.options}"
        " --out {output.decisions} > {log} 2>&1"
