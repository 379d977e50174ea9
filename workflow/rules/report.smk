# Stage 7: the sweep report over every run's fits, predictions (backtest), racing decisions
# and steps (generator–trainer mismatch).


rule report:
    input:
        fits=expand(rules.fit.output.fit, run=sorted(RUNS)),
        predictions=expand(rules.predictions.output.table, run=sorted(RUNS)),
        racing=racing_decisions,
        steps=trained_checkpoints,
    output:
        table=report(
            res("report", "scaling.parquet"),
            caption="../report/scaling.rst",
            category="Scaling report",
        ),
        markdown=report(
            res("report", "scaling.md"),
            caption="../report/scaling_md.rst",
            category="Scaling report",
        ),
        curves=report(
            res("report", "curves.png"),
            caption="../report/curves.rst",
            category="Scaling report",
        ),
        mismatch=report(
            res("report", "mismatch.png"),
            caption="../report/mismatch.rst",
            category="Scaling report",
        ),
    params:
        out=lambda w, output: os.path.dirname(output.table),
        options=options(sweep.report_options(SWEEP)),
        racing=lambda w, input: racing_report_args(input.racing),
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
        " > {log} 2>&1"
