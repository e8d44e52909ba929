"""The docs hold no dated history: measurements live in bench/results.jsonl, docs/results.md is
generated from it by bench/results_table.py (and must equal what the generator prints), and the
prose of README.md, docs/*.md and config/README.md names no dated timing. The raw GPU logs
under docs/gpu-runs/ are data and are not checked. Offline and fast: it reads text files."""

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results.jsonl"
RESULTS_MD = ROOT / "docs" / "results.md"


def _load_generator():
    spec = importlib.util.spec_from_file_location(
        "results_table", ROOT / "bench" / "results_table.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


results_table = _load_generator()


# --- the results data and the table generated from it


def test_results_md_is_the_generated_table():
    expected = results_table.render(results_table.load(RESULTS))
    assert RESULTS_MD.read_text(encoding="utf-8") == expected, (
        "docs/results.md differs from the generator's output: run "
        f"`{results_table.COMMAND}` after editing bench/results.jsonl"
    )


def test_every_result_line_says_when_where_and_what():
    lines = [line for line in RESULTS.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert lines
    for number, line in enumerate(lines, start=1):
        row = json.loads(line)
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", row.get("date") or ""), (number, row)
        assert row.get("device"), (number, row)
        assert row.get("command") or row.get("what"), (number, row)
        assert row.get("figures"), (number, row)


def test_the_readmes_results_table_is_the_generated_one():
    table = results_table.render_readme(results_table.load(RESULTS))
    assert table.count("\n") >= 5, "the README table has its three measured lines"
    assert table in (ROOT / "README.md").read_text(encoding="utf-8"), (
        "README.md's results table differs from `python bench/results_table.py --readme`"
    )


def test_each_set_up_command_the_readme_times_has_a_results_line():
    """The set-up's second line builds table 3 and runs the suite, "How long each takes is under
    Results below": each command of that line is the command of a row the README's table shows."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    setup = readme[readme.index("## Set-up on a fresh machine") : readme.index("## What you get")]
    assert "How long each takes is under Results below" in " ".join(setup.split())
    block = re.search(r"```bash\n(.*?)```", setup, re.S)[1]
    timed = [c.strip() for c in block.splitlines()[-1].split("&&")]
    shown = re.findall(r"\[row\]\(docs/results\.md#([\w.-]+)\)", readme)
    commands = {r["id"]: r["command"] for r in results_table.load(RESULTS) if r["id"] in shown}
    assert len(timed) == 2 and len(commands) == len(shown) >= 3
    for command in timed:
        assert any(c.endswith(command) for c in commands.values()), f"no README row times {command}"


def test_a_readme_line_shows_its_newest_row():
    rows = [
        _row(id="a", date="2026-01-02", readme="table 3", figures={"wall_seconds": 300}),
        _row(id="b", date="2026-01-05", readme="table 3", figures={"wall_seconds": 250}),
        _row(id="c", date="2026-01-09"),
    ]
    lines = results_table.render_readme(rows).splitlines()
    assert lines[2:] == ["| table 3 | CPU | wall 4 min 10 s | [row](docs/results.md#b) |"]


def test_results_md_header_names_the_command():
    first_lines = RESULTS_MD.read_text(encoding="utf-8").splitlines()[:4]
    assert any("Generated" in line and results_table.COMMAND in line for line in first_lines)


def _row(**changes):
    row = {
        "id": "x-1", "topic": "T", "date": "2026-01-02", "device": "CPU", "commit": None,
        "command": None, "what": "w", "figures": {"wall_seconds": 268}, "conditions": "c",
    }  # fmt: skip
    row.update(changes)
    return row


@pytest.mark.parametrize(
    "change, message",
    [
        ({"date": "26 Nov"}, "date '26 Nov' is not YYYY-MM-DD"),
        ({"device": ""}, "device must be non-empty text"),
        ({"figures": {"wall_seconds": "4 min"}}, "figure 'wall_seconds' = '4 min'"),
        ({"figures": {}}, "figures must be a non-empty object"),
        ({"commit": "HEAD"}, "commit 'HEAD' is not a hash"),
        ({"speed": 3}, "unknown key(s) ['speed']"),
    ],
)
def test_a_bad_result_line_is_refused_naming_line_and_key(tmp_path, change, message):
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(_row()) + "\n" + json.dumps(_row(id="x-2", **change)) + "\n")
    with pytest.raises(results_table.ResultsError) as error:
        results_table.load(path)
    assert "line 2" in str(error.value) and message in str(error.value)


def test_a_missing_key_and_a_repeated_id_are_refused(tmp_path):
    path = tmp_path / "results.jsonl"
    row = _row()
    del row["device"]
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(results_table.ResultsError, match="line 1: missing device"):
        results_table.load(path)
    path.write_text(json.dumps(_row()) + "\n" + json.dumps(_row()) + "\n")
    with pytest.raises(results_table.ResultsError, match="line 2: id 'x-1' is also line 1's"):
        results_table.load(path)


def test_figures_are_written_with_their_units():
    figure = results_table.figure
    assert figure("wall_seconds", 268) == "wall 4 min 28 s"
    assert figure("seconds", 5.9) == "5.9 s"
    assert figure("local_img_per_s", 71922) == "local 71,922 img/s"
    assert figure("img_per_s", 70019) == "70,019 img/s"
    assert figure("each_local_img_per_s", [8750, 9153]) == "each local 8,750–9,153 img/s"
    assert figure("best_ci95_points", [-0.44, 0.25]) == "best ci95 [-0.44, 0.25] points"
    assert figure("share_percent", 31) == "share 31%"
    assert figure("ratio", 1.05) == "ratio 1.05"


def test_rows_are_newest_first_within_their_topic():
    rows = [
        _row(id="old", date="2026-01-01"),
        _row(id="other", topic="U", date="2026-03-01"),
        _row(id="new", date="2026-02-01"),
    ]
    text = results_table.render(rows)
    assert text.index("`new`") < text.index("`old`") < text.index("## U")
    assert '<a id="new"></a>' in text


# --- no dated timing in prose

DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
# what dates a passage besides a date: a commit hash (letters and digits) or a relative day
COMMIT = re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")
RELATIVE_DAY = re.compile(
    r"\b(?:as of|the next day|later that day|on a day|that day|today|yesterday)\b", re.IGNORECASE
)
MARKERS = (DATE, COMMIT, RELATIVE_DAY)
# a date inside a path (docs/gpu-runs/2026-11-26-h200/...) names a log folder, not a moment, and
# a link's target is not prose
NOT_PROSE = re.compile(
    r"\]\([^)]*\)|\S*/\S*20\d\d-[01]\d-[0-3]\d\S*|\S*20\d\d-[01]\d-[0-3]\d\S*/\S*"
)
FIGURE = re.compile(
    r"\d[\d,.]*\s*(?:ms|µs|us|s|min|minutes|h|hours|H\d+-hours|img/s|GB)\b"
    r"|\b(?:measured|timed|took|passed|ran)\b",
    re.IGNORECASE,
)
WINDOW = 200  # characters either side of a marker in which a figure makes it a dated timing


def dated_timings(text: str) -> list[str]:
    """The passages of ``text`` where a date, a commit or a relative day ("the next day") stands
    within WINDOW characters of a timing or a word of measurement; a paragraph (or a table row)
    is read as one line."""
    found = []
    for block in _blocks(text):
        block = NOT_PROSE.sub(" ", block)
        for marker in MARKERS:
            for match in marker.finditer(block):
                around = block[max(0, match.start() - WINDOW) : match.end() + WINDOW]
                if FIGURE.search(around.replace(match.group(), " ")):
                    found.append(around.strip())
    return found


def _blocks(text: str):
    paragraph: list[str] = []
    for line in text.splitlines():
        if line.lstrip().startswith("|"):  # a table row stands alone
            yield line
        elif line.strip():
            paragraph.append(line.strip())
            continue
        if paragraph:
            yield " ".join(paragraph)
            paragraph = []
    if paragraph:
        yield " ".join(paragraph)


@pytest.mark.parametrize(
    "text",
    [
        "On an H200 (2026-11-26, f42270c) a table-3 fedgkd run trained at 70,019 img/s.",
        "every table and figure: 276 runs, 19 min 36 s\non an idle machine (2026-11-25, bc9580c)",
        "| 2026-11-23 | CPU, 2 cores | the dry-run | 5.9 s | `time snakemake -n` |",
        "`tests/gpu/test_forkserver_cuda.py` passed on an H200 (2026-11-26) once the server",
        "as of today the full suite takes 15 min",
        "the full suite measured again at 531977c (15 min 34 s, 1,300 tests)",
        "15 min 54 s, 1,272 tests; 14 min 25 s the next day",
    ],
)
def test_a_dated_timing_is_found(text):
    assert dated_timings(text)


@pytest.mark.parametrize(
    "text",
    [
        "| `1_000`, `2024-01-02` | text | 1000, a date |",
        "(`docs/gpu-runs/2026-11-26-h200/conv-kernels.txt`: each convolution's kernels, 208 µs)",
        "fedgkd with graphs trains at 70,019 img/s ([row](results.md#h200-fedgkd-graphs-f42270c))",
        "a run resumed after 10 s of training",
        "the fedgkd.py module re-runs fedgkd and fedgkd+ (fedgkd+ imports it) in 2 s",
        "fedavg is faster ([row](results.md#h200-fedavg-2026-11-26)), 90,008 img/s",
    ],
)
def test_design_text_is_not_taken_for_a_dated_timing(text):
    assert not dated_timings(text)


def _prose_files() -> list[Path]:
    docs = [p for p in sorted((ROOT / "docs").glob("*.md")) if p != RESULTS_MD]
    return [*docs, ROOT / "config" / "README.md"]


@pytest.mark.parametrize("path", _prose_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_hold_no_dated_timing(path):
    found = dated_timings(path.read_text(encoding="utf-8"))
    assert not found, (
        f"{path.relative_to(ROOT)} dates a measurement in prose; put it in bench/results.jsonl "
        f"and link its row in docs/results.md: {found}"
    )


def test_readme_holds_no_dated_timing():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert not dated_timings(text), dated_timings(text)


# --- a GPU figure names its source

# no GPU is where the docs are written: a figure of a GPU run is a row's or says it is not one
GPU = re.compile(r"\b(?:H100|H200|A100|on (?:a|an|the) GPU|on CUDA|GPU (?:time|rate))\b")
GPU_FIGURE = re.compile(
    r"\d[\d,.]*\s*(?:x\b|×|%|ms\b|µs|s\b|min\b|minutes|hours|img/s|PFLOP|TFLOP)"
    r"|\babout (?:a|one) (?:third|quarter|half|fifth)\b|\b\d+ passed\b"
)
SOURCED = re.compile(
    r"results\.md#|\bunmeasured\b|\bnot measured\b|\bestimates?\b|\bestimated\b", re.I
)
QUOTED = re.compile(r'"[^"]*"')  # a title quoted from published material


def unsourced_gpu_figures(text: str) -> list[str]:
    """The paragraphs, list items and table rows of ``text`` that give a figure of a GPU run
    without a row of docs/results.md, or without saying it is unmeasured or an estimate."""
    found = []
    for block in _blocks(re.sub(r"\n\s*- ", "\n\n- ", text)):  # a list item stands alone
        block = QUOTED.sub(" ", block)
        if GPU.search(block) and GPU_FIGURE.search(block) and not SOURCED.search(block):
            found.append(block)
    return found


@pytest.mark.parametrize(
    "text",
    [
        "A probe on an H200 ran about a quarter faster with the folded model compiled.",
        "- on an H200 made about a third of the rate of the same run with graphs",
        "On an H100 its compute floor is ~2 s and the launches take 5-9 minutes.",
    ],
)
def test_a_gpu_figure_without_its_source_is_found(text):
    assert unsourced_gpu_figures(text)


@pytest.mark.parametrize(
    "text",
    [
        "fedgkd on an H200: 70,019 img/s ([row](results.md#h200-fedgkd-graphs-f42270c))",
        "Unmeasured: a table-3 run at 120,000 img/s on an H200.",
        'the blog "TF32 in the A100 GPU Accelerates AI Training up to 20x" reports accuracy',
        "On an H100, estimates: 2,880 steps a round.",
    ],
)
def test_a_sourced_gpu_figure_is_not_taken_for_an_unsourced_one(text):
    assert not unsourced_gpu_figures(text)


@pytest.mark.parametrize(
    "path", [ROOT / "README.md", *_prose_files()], ids=lambda p: str(p.relative_to(ROOT))
)
def test_each_gpu_figure_of_the_docs_names_its_row_or_says_it_is_unmeasured(path):
    found = unsourced_gpu_figures(path.read_text(encoding="utf-8"))
    assert not found, (
        f"{path.relative_to(ROOT)} gives GPU figures without a row of docs/results.md; link the "
        f"row, or say unmeasured (or an estimate, with its arithmetic): {found}"
    )


# --- links into the results


def _anchors_of_results() -> set[str]:
    text = RESULTS_MD.read_text(encoding="utf-8")
    ids = set(re.findall(r'<a id="([^"]+)"></a>', text))
    headings = {results_table.anchor(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}
    return ids | headings


def test_links_into_the_results_name_a_row_or_a_table():
    anchors = _anchors_of_results()
    for path in [*_prose_files(), ROOT / "README.md"]:
        for target in re.findall(r"results\.md#([\w.+-]+)", path.read_text(encoding="utf-8")):
            assert target in anchors, f"{path.relative_to(ROOT)} links results.md#{target}"


def _anchors(path: Path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # a "# comment" in a code block is no heading
    headings = {results_table.anchor(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}
    return headings | set(re.findall(r'<a id="([^"]+)"></a>', text))


def test_links_between_the_docs_reach_their_file_and_heading():
    """Every relative link of the README and the docs names a file or folder that exists, and
    a heading or row of a Markdown file where it names one."""
    for path in [ROOT / "README.md", *_prose_files(), RESULTS_MD]:
        text = path.read_text(encoding="utf-8")
        for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([\w.+-]+))?\)", text):
            if re.match(r"[a-z]+:", target) or not (target or anchor):
                continue  # a web address
            linked = (path.parent / target).resolve() if target else path
            where = f"{path.relative_to(ROOT)} links {target}#{anchor}"
            assert linked.exists(), where
            if anchor:
                assert linked.suffix == ".md" and anchor in _anchors(linked), where


def test_rows_from_a_gpu_log_hold_its_figures(tmp_path):
    """Every row whose source is a bench-results.jsonl under docs/gpu-runs/ holds figures that
    line wrote (rounded as imported), and importing that log gives those rows' figures."""
    rows = results_table.load(RESULTS)
    sources = {row["source"] for row in rows if row.get("source", "").endswith(".jsonl")}
    assert sources
    for source in sorted(sources):
        imported = results_table.import_bench(
            ROOT / source, tmp_path / "results.jsonl", commit=None, topic="T", conditions="c"
        )
        from_log = [row["figures"] for row in imported]
        for row in rows:
            if row.get("source") == source:
                assert row["figures"] in from_log, (row["id"], from_log)
    # appended to one file, the ids stay unique
    assert len(results_table.load(tmp_path / "results.jsonl")) == sum(
        len((ROOT / s).read_text().splitlines()) for s in sources
    )


def test_a_line_that_is_not_from_fedkd_bench_is_refused(tmp_path):
    bench = tmp_path / "bench-results.jsonl"
    bench.write_text('{"date": "2026-01-02", "device": "CPU"}\n')
    with pytest.raises(results_table.ResultsError, match="line 1: not a line of fedkd bench"):
        results_table.import_bench(
            bench, tmp_path / "results.jsonl", commit=None, topic="T", conditions="c"
        )
