# Stage 5: one sigmoid fit per run over its eval files (grouped by task).


rule fit:
    input:
        evals=lambda w: eval_files(w.run),
        cfg=rules.run_config.output.yaml,
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
        options=lambda w: options(sweep.fit_options(SWEEP, RUNS[w.run])),
    threads: threads_of("fit")
    resources:
        **job_resources("fit"),
    # `scalerl fit` exits 2 when a group cannot be fitted (too few points, ...) after writing
    # fits.json with the reason; that is a result of the run, not a workflow failure, so the
    # job succeeds whenever fits.json exists (the report lists the fits that exist).
    conda:
        CONDA_ENV
    shell:
        "scalerl fit {input.evals} {params.options} --tracking {input.cfg} --out {output.fit}"
        " > {log} 2>&1 || test -f {output.fit}/fits.json"
