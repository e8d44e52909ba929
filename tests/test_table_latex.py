"""The .tex of a table is a document a paper includes: every character of it is one LaTeX
typesets with the packages its first line names, whatever text a label, a caption or a dataset
name holds, and whatever the claims page writes itself. Where pdflatex is installed, the files
are compiled in a minimal document."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from claim_runs import TABLE3, pair_runs, render_claims
from fedkd.report.render import render
from fedkd.report.text import tex_escape
from report_runs import agg_file, make_run

# each of these stops pdflatex ("Unicode character ... not set up for use with LaTeX") when
# written as itself
UNSET_IN_LATEX = "β γ Ω ≤ ≥ ≈ − √ ∞ 中 😀"


@pytest.mark.parametrize(
    "text, tex",
    [
        ("β=0.5, γ≤1", r"$\beta$=0.5, $\gamma$$\leq$1"),
        ("Ω − 1 ≈ √2 ≥ ∞", r"$\Omega$ $-$ 1 $\approx$ $\surd$2 $\geq$ $\infty$"),
        ("ΑΒ", "AB"),  # capital alpha and beta are the Latin letters' shapes
        ("中文 😀 e\u0301", "?? ? e?"),  # what no standard LaTeX font has
        ("é ü ñ ß “q” — … × ·", "é ü ñ ß “q” — … × ·"),  # what LaTeX's utf8 has, as written
    ],
)
def test_text_latex_cannot_typeset_is_written_as_latex_or_replaced(text, tex):
    assert tex_escape(text) == tex


HOSTILE = {
    "A&B 50% $5 #1 a_b {x} ~y ^z \\q": "fedavg",
    "β ≤ γ − δ ≈ 中 ✓ | pipe": "fedprox",
    "L" * 150: "fedgkd",
}


def hostile_grid(tmp_path):
    runs = [
        (label, make_run(tmp_path / "runs", f"r{i}", [0.1, 0.5 + i / 10], strategy=strategy,
                         variant=f"{strategy}-β≤{i}"))
        for i, (label, strategy) in enumerate(HOSTILE.items())
    ]  # fmt: skip
    out = tmp_path / "grid"
    options = {
        "columns": list(HOSTILE),
        "caption": f"Caption & % $ # _ {{ }} ~ ^ \\ {UNSET_IN_LATEX} `code_β`.",
        "row_names": {"cifar10": f"CIFAR_10 & {UNSET_IN_LATEX} | p"},
    }
    render("grid", out, aggregate=agg_file(tmp_path, runs), options=options)
    return out.with_suffix(".tex")


def claims_page(tmp_path):
    gaps = {1.0: [0.020, 0.022, 0.018], 0.1: [0.03, -0.03, 0.01]}
    render_claims(tmp_path, pair_runs(tmp_path / "runs", "table3", gaps), TABLE3)
    return tmp_path / "out" / "claims.tex"


LATEX_UNSET = re.compile("[" + re.escape(UNSET_IN_LATEX.replace(" ", "")) + "]")


@pytest.mark.parametrize("make", [hostile_grid, claims_page])
def test_a_table_holds_no_character_latex_cannot_typeset(make, tmp_path):
    tex = make(tmp_path).read_text()
    assert not LATEX_UNSET.findall(tex)
    if r"\checkmark" in tex:
        assert "amssymb" in tex.splitlines()[0], "\\checkmark is amssymb's"


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="needs pdflatex")
@pytest.mark.parametrize("make", [hostile_grid, claims_page])
def test_a_table_compiles_with_the_packages_its_first_line_names(make, tmp_path):
    table = make(tmp_path)
    packages = re.search(r"needs \\usepackage\{([^}]*)\}", table.read_text().splitlines()[0])[1]
    build = tmp_path / "latex"
    build.mkdir()
    shutil.copy(table, build / "table.tex")
    (build / "doc.tex").write_text(
        f"\\documentclass{{article}}\n\\usepackage{{{packages}}}\n\\begin{{document}}\n"
        "\\input{table}\n\\end{document}\n"
    )
    done = subprocess.run(
        ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "doc.tex"],
        cwd=build, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    log = (build / "doc.log").read_text(errors="replace")
    assert done.returncode == 0, re.findall(r"^!.*\n.*", log, re.M)
    assert "Missing character" not in log
    if make is claims_page:  # its own text on the page (a 150-letter label of one's own is not)
        # the claims, a long and wide table, were 1,840 pt too wide and a float too tall
        assert "Float too large" not in log
        too_wide = [float(w) for w in re.findall(r"Overfull \\hbox \(([\d.]+)pt too wide", log)]
        assert max(too_wide, default=0.0) < 1.0, too_wide
