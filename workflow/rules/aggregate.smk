rule aggregate:
    """Every round of every run a table or figure needs, in one long Parquet."""
    input:
        aggregate_inputs,
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
        runs=aggregate_args,
        code=package_files_hash(*REPORT_CODE),
    message:
        "aggregate {output}"
    shell:
        "fedkd aggregate --out {output:q} {params.runs} > {log:q} 2>&1"
