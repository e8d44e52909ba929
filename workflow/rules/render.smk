rule features:
    """A run's t-SNE features (its global model and a local model trained from it), for a figure
    of layout tsne: the training stays out of the render rule."""
    input:
        features_inputs,
    output:
        "results/features/{name}.npz",
    log:
        "results/logs/features/{name}.log",
    wildcard_constraints:
        name=names_regex(plan.names(input="run")),
    conda:
        "../../envs/fedkd.yaml"
    threads: 1
    resources:
        mem_mb=plan.rule_resource("render", "mem_mb", 4000),
        runtime=plan.rule_resource("render", "runtime", 20),
    params:
        args=lambda wc: plan.features_args(wc.name),
        code=lambda wc: plan.features_code_hash(wc.name),
    message:
        "features {output}"
    shell:
        "fedkd features {params.args} --out {output:q} > {log:q} 2>&1"


rule render_table:
    """A table as LaTeX (booktabs), Markdown, CSV and HTML (the report shows the HTML). A table
    with a paper counterpart brings its comparison with the paper along (render_vs_paper), so
    that the command for the table builds both."""
    input:
        lambda wc: plan.render_inputs(wc.name),
        lambda wc: (
            [
                f"results/tables/{wc.name}_vs_paper.{e}"
                for e in ("tex", "md", "csv", "html")
            ]
            if wc.name in plan.paper_tables()
            else []
        ),
    output:
        tex="results/tables/{name}.tex",
        md="results/tables/{name}.md",
        csv="results/tables/{name}.csv",
        # the report shows the table as the paper prints it, grouped by paper and table
        html=report(
            "results/tables/{name}.html",
            caption="../report/table.rst",
            category=lambda wc: report_section(wc.name)[0],
            subcategory=lambda wc: report_section(wc.name)[1],
            labels={"table": "{name}"},
        ),
    log:
        "results/logs/render/{name}.log",
    wildcard_constraints:
        name=names_regex(plan.names(output="table")),
    conda:
        "../../envs/fedkd.yaml"
    threads: 1
    resources:
        mem_mb=plan.rule_resource("render", "mem_mb", 4000),
        runtime=plan.rule_resource("render", "runtime", 20),
    params:
        args=lambda wc: plan.render_args(wc.name),
        options=render_options,
        caption=report_caption,
        prefix=lambda wc: f"results/tables/{wc.name}",
        code=lambda wc: plan.render_code_hash(wc.name),
    message:
        "render results/tables/{wildcards.name}.{{tex,md,csv,html}}"
    shell:
        "fedkd render {params.args} --out {params.prefix:q} --options {params.options:q}"
        " > {log:q} 2>&1"


rule render_figure:
    """A figure as PDF and PNG."""
    input:
        lambda wc: plan.render_inputs(wc.name),
    output:
        pdf="results/figures/{name}.pdf",
        png=report(
            "results/figures/{name}.png",
            caption="../report/figure.rst",
            category=lambda wc: report_section(wc.name)[0],
            subcategory=lambda wc: report_section(wc.name)[1],
            labels={"figure": "{name}"},
        ),
    log:
        "results/logs/render/{name}.log",
    wildcard_constraints:
        name=names_regex(plan.names(output="figure")),
    conda:
        "../../envs/fedkd.yaml"
    threads: 1
    resources:
        mem_mb=plan.rule_resource("render", "mem_mb", 4000),
        runtime=plan.rule_resource("render", "runtime", 20),
    params:
        args=lambda wc: plan.render_args(wc.name),
        options=render_options,
        caption=report_caption,
        # what the figure draws and what its PDF's title holds, for the report's text
        how=lambda wc: sections.rst_text(
            sections.figure_how(
                plan.layout(wc.name).name, plan.render_options(wc.name).get("ddof", 0)
            )
        ),
        metadata=lambda wc: sections.figure_metadata(plan.layout(wc.name).input),
        prefix=lambda wc: f"results/figures/{wc.name}",
        code=lambda wc: plan.render_code_hash(wc.name),
    message:
        "render results/figures/{wildcards.name}.{{pdf,png}}"
    shell:
        "fedkd render {params.args} --out {params.prefix:q} --options {params.options:q}"
        " > {log:q} 2>&1"


rule render_vs_paper:
    """A table beside the paper's own numbers (entries with `paper:`), from the table's aggregate."""
    input:
        lambda wc: plan.render_inputs(wc.name),
    output:
        tex="results/tables/{name}_vs_paper.tex",
        md="results/tables/{name}_vs_paper.md",
        csv="results/tables/{name}_vs_paper.csv",
        html=report(
            "results/tables/{name}_vs_paper.html",
            caption="../report/table.rst",
            category="Beside the paper",
            labels={"table": "{name}"},
        ),
    log:
        "results/logs/render/{name}_vs_paper.log",
    wildcard_constraints:
        name=names_regex(plan.paper_tables()),
    conda:
        "../../envs/fedkd.yaml"
    threads: 1
    resources:
        mem_mb=plan.rule_resource("render", "mem_mb", 4000),
        runtime=plan.rule_resource("render", "runtime", 20),
    params:
        args=lambda wc: plan.vs_paper_args(wc.name),
        options=vs_paper_options,
        caption=vs_paper_caption,
        prefix=lambda wc: f"results/tables/{wc.name}_vs_paper",
        code=lambda wc: plan.render_code_hash(wc.name),
    message:
        "render results/tables/{wildcards.name}_vs_paper.{{tex,md,csv,html}}"
    shell:
        "fedkd render {params.args} --out {params.prefix:q} --options {params.options:q}"
        " > {log:q} 2>&1"


rule unknown_output:
    """A table or figure this configuration does not define (a misspelt target, table33.tex):
    refused as Snakemake resolves it, with the closest valid one and every one listed. Its
    wildcard admits only what the render rules do not make."""
    input:
        unknown_output,
    output:
        "results/{folder}/{file}",
    log:
        "results/logs/unknown_output/{folder}/{file}.log",
    wildcard_constraints:
        folder="tables|figures",
        file=snakefile.unknown_output_regex(plan),
    localrule: True
    message:
        "refuse results/{wildcards.folder}/{wildcards.file}"
    run:
        raise WorkflowError(unknown_output(wildcards))
