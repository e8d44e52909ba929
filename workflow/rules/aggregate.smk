rule runs_list:
    """The runs a table or figure needs, one LABEL<TAB>RUN_DIR a line: the aggregate job reads them
    from this file, since a command line holds a few thousand at most."""
    output:
        "results/aggregate/{name}.runs",
    log:
        "results/logs/aggregate/{name}.runs.log",
    wildcard_constraints:
        name=names_regex(plan.names(input="aggregate")),
    localrule: True
    params:
        # the list's hash: a changed list is written again (and re-makes the aggregate)
        digest=lambda wc: plan.runs_list_digest(wc.name),
    message:
        "list the runs of {output}"
    run:
        write_runs_list(wildcards.name, output[0], log[0])


rule aggregate:
    """Every round of every run a table or figure needs, in one long Parquet."""
    input:
        runs="results/aggregate/{name}.runs",
        files=aggregate_inputs,
    output:
        "results/aggregate/{name}.parquet",
    log:
        "results/logs/aggregate/{name}.log",
    wildcard_constraints:
        name=names_regex(plan.names(input="aggregate")),
    conda:
        "../../envs/fedkd.yaml"
    threads: 1
    resources:
        mem_mb=plan.rule_resource("aggregate", "mem_mb", 4000),
        runtime=plan.rule_resource("aggregate", "runtime", 20),
    params:
        code=package_files_hash(*REPORT_CODE),
        # the list the plan names: a list file edited since it was written is refused
        list_sha256=lambda wc: plan.runs_list_sha256(wc.name),
    message:
        "aggregate {output}"
    shell:
        "fedkd aggregate --out {output:q} --runs-file {input.runs:q}"
        " --runs-sha256 {params.list_sha256} > {log:q} 2>&1"
