rule partition:
    """Split a dataset's training set over clients (one Parquet: index → client)."""
    output:
        "results/partitions/{dataset}/{part}-K{clients}/seed{seed}.parquet",
    log:
        "results/logs/partition/{dataset}/{part}-K{clients}/seed{seed}.log",
    wildcard_constraints:
        part=r"(dirichlet-equal|dirichlet)-a[0-9.]+|shards-s[0-9]+|iid",
        clients=r"[0-9]+",
        seed=r"[0-9]+",
    conda:
        "../../envs/fedkd.yaml"
    threads: 1
    resources:
        mem_mb=plan.rule_resource("partition", "mem_mb", 2000),
        runtime=plan.rule_resource("partition", "runtime", 20),
    params:
        args=partition_args,
        # the partitioners and this dataset's loader: an edit re-draws its partitions (and so
        # re-trains their runs)
        code=lambda wc: plan.partition_code_hash(wc.dataset),
    message:
        "partition {output}"
    shell:
        "fedkd partition {params.args} --force --out {output:q} > {log:q} 2>&1"
