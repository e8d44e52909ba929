rule render_table:
    """A table as LaTeX (booktabs), Markdown and CSV."""
    input:
        render_inputs,
    output:
        tex="results/tables/{name}.tex",
        md="results/tables/{name}.md",
        csv=report(
            "results/tables/{name}.csv",
            caption="../report/table.rst",
            category="Tables",
            labels={"table": "{name}"},
        ),
    log:
        "results/logs/render/{name}.log",
    wildcard_constraints:
        name=names_regex(config.get("tables") or {}),
    conda:
        "../../envs/fedkd.yaml"
    threads: 1
    resources:
        mem_mb=rule_resources("render", "mem_mb", 4000),
        runtime=rule_resources("render", "runtime", 20),
    params:
        args=lambda wc: render_args(wc),
        options=lambda wc: json.dumps(render_options(wc.name), sort_keys=True),
        caption=lambda wc: caption(wc.name),
        prefix=lambda wc: f"results/tables/{wc.name}",
        code=render_code_hash,
    shell:
        "fedkd render {params.args} --out {params.prefix:q} --options {params.options:q}"
        " > {log:q} 2>&1"


rule render_figure:
    """A figure as PDF and PNG."""
    input:
        render_inputs,
    output:
        pdf="results/figures/{name}.pdf",
        png=report(
            "results/figures/{name}.png",
            caption="../report/figure.rst",
            category="Figures",
            labels={"figure": "{name}"},
        ),
    log:
        "results/logs/render/{name}.log",
    wildcard_constraints:
        name=names_regex(config.get("figures") or {}),
    conda:
        "../../envs/fedkd.yaml"
    threads: 1
    resources:
        mem_mb=rule_resources("render", "mem_mb", 4000),
        runtime=rule_resources("render", "runtime", 20),
    params:
        args=lambda wc: render_args(wc),
        options=lambda wc: json.dumps(render_options(wc.name), sort_keys=True),
        caption=lambda wc: caption(wc.name),
        prefix=lambda wc: f"results/figures/{wc.name}",
        code=render_code_hash,
    shell:
        "fedkd render {params.args} --out {params.prefix:q} --options {params.options:q}"
        " > {log:q} 2>&1"
