# Stage 7: the sweep report over every run's fits, predictions (backtest), racing decisions,
# steps (generator–trainer mismatch) and base models (their sizes, for the forecast across
# scale).


rule report:
    input:
        fits=expand(rules.fit.output.fit, run=sorted(RUNS)),
        predictions=expand(rules.predictions.output.table, run=sorted(RUNS)),
        racing=racing_decisions,
        steps=trained_checkpoints,
        bases=expand(rules.base.output.model, model=SWEEP.grid.models),
    output:
        table=report_file("scaling.parquet", "scaling.rst"),
        markdown=report_file("scaling.md", "scaling_md.rst"),
        curves=report_file("curves.png", "curves.rst"),
        mismatch=report_file("mismatch.png", "mismatch.rst"),
    params:
        out=lambda w, output: os.path.dirname(output.table),
        options=options(sweep.report_options(SWEEP)),
        racing=lambda w, input: racing_report_args(input.racing),
        sizes=lambda w, input: model_size_args(input.bases),
    log:
        res("logs", "report.log"),
    benchmark:
        res("benchmarks", "report.tsv")
    threads: threads_of("report")
    resources:
        **job_resources("report"),
    conda:
        CONDA_ENV
    shell:
        "scalerl report {input.fits} {params.options} --out {params.out}"
        " --predictions {input.predictions} {params.racing} --steps {input.steps}"
        " {params.sizes} > {log} 2>&1"
