rule train:
    """One federated run; its path is its identity (see fedkd.run_paths)."""
    input:
        partition=train_partition,
    output:
        run_json="results/runs/{dataset}/{variant}/{setting}/seed{seed}/run.json",
        metrics="results/runs/{dataset}/{variant}/{setting}/seed{seed}/metrics.parquet",
    log:
        "results/logs/train/{dataset}/{variant}/{setting}/seed{seed}.log",
    wildcard_constraints:
        dataset=r"[^/]+",
        variant=r"[^/]+",
        setting=r"[^/]+",
        seed=r"[0-9]+",
    conda:
        "../../envs/fedkd.yaml"
    threads: train_resource("threads", 1)
    resources:
        gpu=train_resource("gpu", 1),
        mem_mb=train_resource("mem_mb", 4000),
        runtime=train_runtime,
    params:
        run="results/runs/{dataset}/{variant}/{setting}/seed{seed}",
        args=train_args,
        # hash of exactly the sources this run's strategy depends on: editing one strategy
        # re-runs its runs only, and a revert restores "nothing to be done"
        code=train_code_hash,
        stamp=train_stamp,
    message:
        "train results/runs/{wildcards.dataset}/{wildcards.variant}/{wildcards.setting}/seed{wildcards.seed}"
    shell:
        # A killed job resumes from its checkpoint, but only under the same flags and code;
        # otherwise the run starts afresh. The log starts with where the job ran (which GPU).
        """
        mkdir -p {params.run:q}
        if [ "$(cat {params.run:q}/.stamp 2>/dev/null)" != {params.stamp} ]; then
            rm -f {params.run:q}/checkpoint.pt
            echo {params.stamp} >{params.run:q}/.stamp
        fi
        export OMP_NUM_THREADS={threads} MKL_NUM_THREADS={threads}
        echo "[workflow] host $(hostname), CUDA_VISIBLE_DEVICES=${{CUDA_VISIBLE_DEVICES-unset}}" >{log:q}
        fedkd train --out {params.run:q} {params.args} >>{log:q} 2>&1
        """
