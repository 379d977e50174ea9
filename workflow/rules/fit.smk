# Stage 5: one sigmoid fit per run over its eval files (grouped by task), then the sweep report.


rule fit:
    input:
        evals=lambda w: eval_files(w.run),
        cfg=run_dir("{run}", "run.yaml"),
    output:
        fit=report(
            directory(run_dir("{run}", "fit")),
            patterns=["{group}/curve.png"],
            caption="../report/fit.rst",
            category="Fits per run",
            subcategory="{run}",
            labels={"run": "{run}", "group": "{group}"},
        ),
    log:
        res("logs", "fit", "{run}.log"),
    benchmark:
        res("benchmarks", "fit", "{run}.tsv")
    params:
        meta=lambda w: fit_meta_args(w.run),
        group_by=SWEEP.fit.group_by,
        compute=f"compute_{SWEEP.fit.compute}",
        extra=shlex.join(SWEEP.fit.extra_args),
    threads: rule_resources("fit")["threads"]
    resources:
        **job_resources("fit"),
    # `scalerl fit` exits 2 when a group cannot be fitted (too few points, ...) after writing
    # fits.json with the reason; that is a result of the run, not a workflow failure, so the
    # job succeeds whenever fits.json exists (the report lists the fits that exist).
    conda:
        CONDA_ENV
    shell:
        "scalerl fit {input.evals} --group-by {params.group_by} --compute-col {params.compute}"
        " {params.meta} {params.extra} --tracking {input.cfg} --out {output.fit} > {log} 2>&1"
        " || test -f {output.fit}/fits.json"


rule report:
    input:
        fits=expand(run_dir("{run}", "fit"), run=sorted(RUNS)),
        predictions=expand(run_dir("{run}", "predictions.parquet"), run=sorted(RUNS)),
        racing=racing_decisions,
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
    params:
        out=lambda w, output: os.path.dirname(output.table),
        by="model,gen_len,recipe,batch,mix,task",
        order=report_order_args(),
        racing=lambda w, input: racing_report_args(input.racing),
    log:
        res("logs", "report.log"),
    benchmark:
        res("benchmarks", "report.tsv")
    threads: rule_resources("report")["threads"]
    resources:
        **job_resources("report"),
    conda:
        CONDA_ENV
    shell:
        "scalerl report {input.fits} --by {params.by} {params.order} --out {params.out}"
        " --predictions {input.predictions} {params.racing}"
        " > {log} 2>&1"
