"""Configuration text in `snakemake --report`: a name, description, stand-in or caption carrying
reST directives, roles, links or HTML, and a column label closing the report's <script>, reach the
report as the characters typed: no element or attribute that runs, no link to javascript: or
file:, no local file's content, no docutils error box. The report is parsed, not grepped."""

from __future__ import annotations

import base64
import json
import os
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml
from docutils.core import publish_parts

from fedkd.report.aggregate import ReportError
from fedkd.report.agreement import write_front_page
from fedkd.report.sections import rst_text, script_safe_json
from test_workflow import freeze_sources, snakemake

SECRET = "SECRET-FILE-CONTENT-4242"
SCRIPT_LABEL = "FedAvg</script><script>alert('label')</script><!--"


def payloads(secret_file: Path) -> dict[str, str]:
    return {
        "raw": ".. raw:: html\n\n   <img src=x onerror=alert('raw')>\n",
        "include": f".. include:: {secret_file}\n\n",
        "raw_file": f".. raw:: html\n   :file: {secret_file}\n\n",
        "links": "`click <javascript:alert('link')>`_ and `local <file:///etc/passwd>`_",
        "role": ":raw-html:`<b onclick=alert('role')>x</b>` |sub| [1]_ x_",
        "jinja": "{{ 7 * 7 }} {% if true %}J{% endif %} {# c #}",
        "plain": "*a* **b** ``c`` 1. - • =====",
        "html": "<script>alert('html')</script><img src=x onerror=alert('img')>",
        "nul": "before\x00after",
    }


# ----------------------------------------------------------------------------- the HTML checks


class Elements(HTMLParser):
    """Every start tag (name, attributes) and the text of every <script> element."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.scripts: list[tuple[dict, str]] = []
        self._script: dict | None = None
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, attrs))
        if tag == "script":
            self._script = dict(attrs)
            self.scripts.append((self._script, ""))

    def handle_endtag(self, tag):
        if tag == "script":
            self._script = None

    def handle_data(self, data):
        if self._script is not None:
            attrs, text = self.scripts[-1]
            self.scripts[-1] = (attrs, text + data)
        else:
            self.text.append(data)


def parse(html: str) -> Elements:
    parser = Elements()
    parser.feed(html)
    parser.close()
    return parser


def assert_inert(html: str, where: str, allowed: tuple[str, ...] = ()) -> None:
    """No element or attribute in ``html`` (a caption or the front page, as Snakemake made it)
    that runs or loads anything, and no docutils error box; ``allowed``: elements the page has
    of its own (a table's <b> best value)."""
    page = parse(html)
    for tag, attrs in page.tags:
        forbidden = {"script", "img", "iframe", "object", "embed", "b"} - set(allowed)
        assert tag not in forbidden, (where, tag)
        for name, value in attrs:
            assert not name.lower().startswith("on"), (where, tag, name)
            if name in ("href", "src") and value:
                assert not re.match(r"\s*(javascript|file|data|vbscript):", value, re.I), (
                    where,
                    value,
                )
    assert "system-message" not in html and "problematic" not in html, where
    assert SECRET not in html, where


SNAKEMAKE_DATA = re.compile(r"\s*var (\w+) = (.*);\s*", re.S)


def report_data(html: str) -> dict:
    """The report's data scripts (``var name = JSON;``), each parsed as JSON: a value that closed
    its <script> element would leave one of them cut short, and another script behind."""
    page = parse(html)
    data = {}
    for attrs, text in page.scripts:
        found = SNAKEMAKE_DATA.fullmatch(text)
        if attrs.get("id") in ("workflow-desc", "results", "categories", "rules"):
            assert found, f"the script {attrs.get('id')} is cut: {text[:200]!r}"
            data[found[1]] = json.loads(found[2])
    return data


def template_scripts() -> int:
    """How many <script> elements Snakemake's report template has (its own, and no others)."""
    import snakemake.report.html_reporter as reporter

    template = Path(reporter.__file__).parent / "template" / "index.html.jinja2"
    return len(parse(template.read_text()).scripts)


# ----------------------------------------------------------------------------- unit tests


def test_reST_markup_in_user_text_renders_as_the_characters_typed(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    for name, text in payloads(secret).items():
        html = publish_parts(rst_text(text), writer="html")["body"]
        assert_inert(html, name)
        shown = "".join(parse(html).text).strip()
        expected = " ".join(text.split()).replace("\x00", "\ufffd")
        assert shown == expected, name
        # neither Jinja (Snakemake renders captions as templates first) nor a <script> context
        # (Snakemake embeds each job's params in one) sees markup in it
        assert not re.search(r"\{[{%#]|</|<!--", rst_text(text)), name


def test_options_json_cannot_close_the_reports_script_element():
    options = {"columns": [SCRIPT_LABEL], "caption": "a & b <!-- c -->"}
    text = script_safe_json(options)
    assert json.loads(text) == options
    assert not re.search(r"</|<!--|<|>", text)


def test_the_front_page_shows_the_configuration_name_and_description_as_text(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    template = tmp_path / "workflow.rst"
    template.write_text("Configuration **@CONFIG_NAME@** (@CONFIG_DESCRIPTION@).\n")
    texts = payloads(secret)
    name, description = texts["raw"] + texts["jinja"], texts["include"] + "@CONFIG_NAME@"
    out = write_front_page(template, tmp_path / "none", tmp_path / "front.rst", False, name=name,
                           description=description, summary=False)  # fmt: skip
    html = publish_parts(out.read_text(), writer="html")["body"]
    assert_inert(html, "front page")
    shown = "".join(parse(html).text)
    assert " ".join(name.split()) in shown and " ".join(description.split()) in shown
    for name in (" ", ""):  # bold text of nothing would be a docutils error
        out = write_front_page(template, tmp_path / "none", tmp_path / "blank.rst", False,
                               name=name, summary=False)  # fmt: skip
        html = publish_parts(out.read_text(), writer="html")["body"]
        assert "system-message" not in html and f"<strong>{name!r}</strong>" in html


def test_a_table_file_name_in_the_front_page_summary_is_text(tmp_path):
    from fedkd.report.agreement import summary_rst

    record = {"table": "x`` .. raw:: html", "with_runs": 1, "concordant": 0, "pairs": 0,
              "own": 1, "judged": 1, "within": 1, "mean_abs_difference": 1.0,
              "unit": ":raw:`<b>`"}  # fmt: skip
    html = publish_parts(summary_rst([record], False), writer="html")["body"]
    assert_inert(html, "summary")
    assert "x`` .. raw:: html_vs_paper" in "".join(parse(html).text)


# ----------------------------------------------------------------------------- end to end


@pytest.mark.slow
def test_a_report_from_hostile_configuration_text_runs_no_script_and_reads_no_file(tmp_path):
    """A configuration whose every text carries a payload, built (one run of one round, and the
    traits table) and reported: the report's data scripts are whole, the page has Snakemake's
    <script> elements only, and the front page and captions are inert."""
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    texts = payloads(secret)
    config = {
        "name": "hostile " + texts["raw"] + texts["jinja"],
        "description": texts["include"] + texts["plain"] + texts["nul"],
        # a stand-in names a paper dataset (refused otherwise); a row name carries the text
        "stand_ins": {"mnist5k": "CIFAR-10"},
        "seeds": [0],
        "defaults": {"partition": "iid", "clients": 2, "participation": 1.0,
                     "local_epochs": 1, "rounds": 1, "batch_size": 64, "device": "cpu"},
        "datasets": {"mnist5k": {"model": "cnn",
                                 "model_options": {"channels": [4, 8], "hidden": 16}}},
        "variants": {"fedavg": {"strategy": "fedavg"}},
        "tables": {
            "table1": {"layout": "traits", "caption": texts["include"] + texts["html"],
                       "options": {"strategies": ["fedavg"]}},
            "grid": {"layout": "grid", "caption": texts["raw_file"] + texts["jinja"],
                     "grid": {"dataset": ["mnist5k"]}, "columns": {SCRIPT_LABEL: "fedavg"},
                     "options": {"row_names": {"mnist5k": texts["links"] + texts["role"]}}},
        },
        "figures": {
            "curves": {"layout": "curves", "caption": texts["raw"] + texts["links"],
                       "grid": {"dataset": ["mnist5k"]}, "columns": {SCRIPT_LABEL: "fedavg"}},
        },
    }  # fmt: skip
    configfile = tmp_path / "hostile.yaml"
    configfile.write_text(yaml.safe_dump(config))
    workdir = tmp_path / "work"
    src = freeze_sources(tmp_path / "src")
    snakemake(workdir, configfile, "--cores", "1", src=src, timeout=600)
    snakemake(workdir, configfile, "--report", "results/report.html", src=src, timeout=600)
    html = (workdir / "results/report.html").read_text()

    assert SECRET not in html
    page = parse(html)
    assert len(page.scripts) == template_scripts()
    data = report_data(html)
    assert_inert(data["workflow_desc"], "front page")
    front = "".join(parse(data["workflow_desc"]).text)
    assert " ".join(config["name"].split()) in front
    results = data["results"]
    assert {Path(p).name for p in results} == {"table1.html", "grid.html", "curves.png"}
    for path, result in results.items():
        assert_inert(result["caption"], path)
        assert "alert" not in json.dumps(result["labels"]), path
        if path.endswith(".html"):  # the table itself, embedded as a data URI
            head, _, body = result["data_uri"].partition(",")
            assert head.endswith(";base64"), head
            assert_inert(base64.b64decode(body).decode(), path, allowed=("b",))
    captions = {Path(p).name: "".join(parse(r["caption"]).text) for p, r in results.items()}
    assert " ".join(texts["include"].split()) in captions["table1.html"]
    assert " ".join(texts["raw_file"].split()) in captions["grid.html"]
    assert " ".join(texts["links"].split()) in captions["curves.png"]


# ----------------------------------------------------------------------------- table files

HOSTILE_LABELS = {
    "A|B <b>x</b>\nnew": "fedavg",  # a pipe, HTML and a line break
    '=HYPERLINK("http://evil.invalid","x")': "fedprox",  # a spreadsheet formula
    "nul\x00here": "fedgkd",
}


def hostile_table(tmp_path) -> Path:
    from fedkd.report.render import render
    from report_runs import agg_file, make_run

    runs = []
    for i, (label, strategy) in enumerate(HOSTILE_LABELS.items()):
        run = make_run(tmp_path / "runs", f"r{i}", [0.1, 0.5 + i / 10], strategy=strategy,
                       variant=f"{strategy}-v")  # fmt: skip
        runs.append((label, run))
    caption = "First line.\n\nSecond <script>x</script> with NUL \x00 and `code`."
    out = tmp_path / "t"
    render("grid", out, aggregate=agg_file(tmp_path, runs),
           options={"columns": list(HOSTILE_LABELS), "caption": caption})  # fmt: skip
    return out


def test_a_label_or_caption_is_text_in_every_table_format(tmp_path):
    out = hostile_table(tmp_path)
    files = {suffix: out.with_name(out.name + suffix).read_text() for suffix in EXTENSIONS}
    for suffix, text in files.items():
        assert "\x00" not in text, suffix
    tex = files[".tex"]
    caption = re.search(r"\\caption\{(.*)\}\n", tex)[1]
    assert r"A\textbar{}B \textless{}b\textgreater{}x" in tex and r"\textbackslash" not in tex
    assert "\n\n" not in tex and r"\texttt{code}" in caption and r"nul?here" in tex
    md = files[".md"]
    table = [line for line in md.splitlines() if line.startswith("|")]
    cells = {len(re.findall(r"(?<!\\)\|", line)) for line in table}
    assert len(cells) == 1, "every row has the header's cells: no label broke a row"
    assert r"A\|B &lt;b&gt;x&lt;/b&gt; new" in md and "<b>" not in md and "<script>" not in md
    assert md.splitlines()[0].startswith("Table: First line. Second &lt;script&gt;")
    assert "nul\ufffdhere" in md
    page = parse(files[".html"])
    assert not [t for t, _ in page.tags if t == "script"]
    assert "A|B <b>x</b> new" in "".join(page.text) and "nul\ufffdhere" in files[".html"]
    assert "&lt;b&gt;x&lt;/b&gt;" in files[".html"]


MARKDOWN_LABELS = [
    "[mine](https://evil.example/x)",
    "**bold** _em_ ~~gone~~",
    "a`b`c",
    "![i](x.png)",
]


def test_markdown_in_a_label_or_caption_shows_as_the_characters_typed(tmp_path):
    """The .md table parsed as CommonMark (with GFM's tables and strikethrough): a label or a
    caption that spells a link, an image, emphasis or strikethrough shows those characters, and
    a caption's `code` span, the one markup captions have in every format, stays code."""
    from markdown_it import MarkdownIt

    from fedkd.report.render import render
    from report_runs import agg_file, make_run

    runs = [(label, make_run(tmp_path / "runs", f"r{i}", [0.1, 0.5]))
            for i, label in enumerate(MARKDOWN_LABELS)]  # fmt: skip
    out = tmp_path / "t"
    caption = "See [here](https://evil.example/c), *this* and `a_key: 1`."
    # without the table's own markup (its best and second-best cells in bold and underlined)
    render("grid", out, aggregate=agg_file(tmp_path, runs),
           options={"columns": MARKDOWN_LABELS, "caption": caption, "highlight": False})  # fmt: skip
    parser = MarkdownIt("commonmark").enable(["table", "strikethrough"])
    tokens = parser.parse(out.with_suffix(".md").read_text())
    inline = [child for tok in tokens if tok.type == "inline" for child in tok.children]
    markup = {c.type for c in inline} - {"text", "softbreak", "code_inline"}
    assert not markup, markup
    assert [c.content for c in inline if c.type == "code_inline"] == ["a_key: 1"]
    shown = "".join(c.content for c in inline)
    for text in [*MARKDOWN_LABELS, "See [here](https://evil.example/c), *this* and "]:
        assert text in shown, text


def test_a_csv_cell_that_starts_a_formula_starts_with_a_quote(tmp_path):
    import pandas as pd

    from fedkd.report.writers import csv_cell

    out = hostile_table(tmp_path)
    csv = pd.read_csv(out.with_name("t.csv"))
    labels = set(csv["label"])
    assert '\'=HYPERLINK("http://evil.invalid","x")' in labels and "nul\ufffdhere" in labels
    for start in ("=", "+", "-", "@", "\t", "\r"):
        assert csv_cell(start + "1+2") == "'" + start.replace("\r", "\ufffd") + "1+2"
    assert csv_cell(-1.5) == -1.5 and csv_cell("fedavg") == "fedavg"
    # a number written as text stays a number; one hiding a formula behind it does not
    assert csv_cell("-0.5") == "-0.5" and csv_cell("+3e2") == "+3e2"
    assert csv_cell("-0.5+cmd|' /C calc'!A0") == "'-0.5+cmd|' /C calc'!A0"
    assert csv_cell("\t-1") == "'\t-1"


def test_a_latex_label_cannot_end_itself(tmp_path):
    from fedkd.report.aggregate import ReportError
    from fedkd.report.render import render
    from report_runs import agg_file, make_run

    agg = agg_file(tmp_path, [("fedavg", make_run(tmp_path / "runs", "a", [0.5]))])
    with pytest.raises(ReportError, match=r"label 'x}\\\\input\{/etc/passwd' is not a LaTeX"):
        render("grid", tmp_path / "t", aggregate=agg,
               options={"columns": ["fedavg"], "label": "x}\\input{/etc/passwd"})  # fmt: skip


EXTENSIONS = (".tex", ".md", ".csv", ".html")


def test_a_figure_caption_with_nul_is_written_replaced_into_its_metadata(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from PIL import Image

    from fedkd.report.writers import save_figure

    fig = plt.figure()
    pdf, png = save_figure(fig, tmp_path / "f", "cap\x00tion", "lab\x00el")
    plt.close(fig)
    assert Image.open(png).text == {"Title": "cap\ufffdtion", "Description": "lab\ufffdel"}
    assert b"cap\x00tion" not in pdf.read_bytes()


def test_the_reports_docutils_inserts_no_file_whatever_the_text_says(tmp_path):
    """Defence behind the escaping: the workflow has docutils read workflow/report/docutils.conf
    after the user's own configuration files, and an `include` or `raw :file:` is refused."""
    import subprocess
    import sys

    from fedkd.report.sections import restrict_docutils

    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    conf = Path(__file__).resolve().parents[1] / "workflow" / "report" / "docutils.conf"
    user_conf = tmp_path / "user.conf"
    user_conf.write_text("[general]\nfile_insertion_enabled: true\n")
    environ = {"DOCUTILSCONFIG": str(user_conf)}
    restrict_docutils(conf, environ)
    restrict_docutils(conf, environ)  # once only
    assert environ["DOCUTILSCONFIG"].split(os.pathsep) == [str(user_conf), str(conf)]
    default: dict = {}
    restrict_docutils(conf, default)
    assert default["DOCUTILSCONFIG"].endswith(os.pathsep + str(conf))
    text = f".. include:: {secret}\n\n.. raw:: html\n   :file: {secret}\n"
    code = (
        "import sys; from docutils.core import publish_parts; "
        "print(publish_parts(sys.stdin.read(), writer='html')['body'])"
    )
    for env, inserted in (({}, True), (environ, False)):
        proc = subprocess.run([sys.executable, "-c", code], input=text, capture_output=True,
                              text=True, env={**os.environ, **env}, cwd=tmp_path, check=True)  # fmt: skip
        assert (SECRET in proc.stdout) == inserted, proc.stdout


@pytest.mark.parametrize(
    "note", ["# a heading", "- an item", "+ an item", "12. an item", "2) an item", "---", "    code",
             "1.5 ± 0.5 stays as it is", "-0.3 pp", "#tag"],
)  # fmt: skip
def test_a_note_is_one_paragraph_of_its_own_text(note):
    """A table's note is a paragraph of its own line: whatever it starts with, CommonMark reads
    one paragraph holding the note's text, not a heading, a list, a rule or a code block."""
    from markdown_it import MarkdownIt

    from fedkd.report.text import md_paragraph

    tokens = MarkdownIt("commonmark").parse(md_paragraph(note))
    assert [t.type for t in tokens] == ["paragraph_open", "inline", "paragraph_close"]
    assert tokens[1].children[0].content == note.strip()


def test_another_outputs_aggregate_in_place_of_this_ones_is_refused(tmp_path):
    """The workflow writes each aggregate beside its runs list (results/aggregate/NAME.runs):
    an aggregate holding a run its list does not name (another table's, copied or swapped in)
    is refused, naming both files; one holding the listed runs renders."""
    from fedkd.report.render import render
    from report_runs import agg_file, make_run

    mine = [("fedavg", make_run(tmp_path / "runs", "a", [0.1, 0.5], alpha=1.0))]
    other = [*mine, ("fedavg", make_run(tmp_path / "runs", "b", [0.2, 0.6], alpha=0.1))]
    (tmp_path / "t.runs").write_text("".join(f"{label}\t{run}\n" for label, run in mine))
    render("grid", tmp_path / "ok", aggregate=agg_file(tmp_path, mine, "t.parquet"),
           options={"columns": ["fedavg"]})  # fmt: skip
    swapped = agg_file(tmp_path, other, "t.parquet")
    with pytest.raises(ReportError, match=r"holds 1 run\(s\) that .*t\.runs does not list"):
        render("grid", tmp_path / "no", aggregate=swapped, options={"columns": ["fedavg"]})


def test_an_aggregate_lacking_a_listed_run_is_refused(tmp_path):
    """Another table's aggregate whose runs are a part of this one's list (table 5's runs at
    alpha 1 in table 3's place) is refused, naming the run it lacks: rendered, table 3 would lose
    its alpha 0.1 rows silently. A listed run with no round still has its round-0 row."""
    from fedkd.report.render import render
    from report_runs import agg_file, make_run

    runs = [
        ("fedavg", make_run(tmp_path / "runs", "a", [0.1, 0.5], alpha=1.0)),
        ("fedavg", make_run(tmp_path / "runs", "b", [0.2, 0.6], alpha=0.1)),
        ("fedavg", make_run(tmp_path / "runs", "c", [], alpha=0.5, status="diverged")),
    ]
    (tmp_path / "t.runs").write_text("".join(f"{label}\t{run}\n" for label, run in runs))
    render("grid", tmp_path / "ok", aggregate=agg_file(tmp_path, runs, "t.parquet"),
           options={"columns": ["fedavg"]})  # fmt: skip
    part = agg_file(tmp_path, runs[:1], "t.parquet")
    with pytest.raises(
        ReportError, match=r"lacks 2 run\(s\) that .*t\.runs lists \(e\.g\. fedavg .*/b\)"
    ):
        render("grid", tmp_path / "no", aggregate=part, options={"columns": ["fedavg"]})
