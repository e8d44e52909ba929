"""The code hashes (fedkd.provenance) cover what runs: an edit of a comment, a docstring or a blank
line re-runs nothing, and every other edit, a string's contents included, changes the hash. The
text they hash is the same under every Python the package supports, so a login node and a
compute node on different Pythons agree."""

from __future__ import annotations

import ast
import io
import json
import os
import shutil
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

from fedkd.code_text import code_text, scan_by_pattern, scan_by_tokens
from fedkd.provenance import PACKAGE_DIR, files_hash

MODULE = '''"""A module's docstring."""

import math  # a comment

RATE = 0.5
TEMPLATE = """first line

third line, after a blank one"""


class Scaler:
    """A class's docstring,
    over two lines."""

    def scale(self, x):
        """A method's docstring."""
        # a comment on a line of its own

        return f"{x * RATE:.3f} # not a comment" + TEMPLATE  # a trailing comment


def ratio(a, b):
    return math.log(a) - math.log(b)
'''


def hash_of(tmp_path: Path, text: str) -> str:
    path = tmp_path / "module.py"
    path.write_text(text)
    return files_hash([path])


@pytest.mark.parametrize(
    "old, new",
    [
        ("# a comment\n", "# another comment, longer\n"),
        ("  # a trailing comment", ""),
        ('"""A method\'s docstring."""', '"""Another docstring."""'),
        ('"""A module\'s docstring."""\n', ""),
        ('    """A class\'s docstring,\n    over two lines."""\n', ""),
        ("\n\ndef ratio", "\n\n\n\n# a section\n\ndef ratio"),
    ],
    ids=[
        "comment",
        "trailing-comment",
        "docstring",
        "module-docstring",
        "class-docstring",
        "blank",
    ],
)
def test_comments_docstrings_and_blank_lines_leave_the_hash(tmp_path, old, new):
    assert old in MODULE
    assert hash_of(tmp_path, MODULE.replace(old, new, 1)) == hash_of(tmp_path, MODULE)


@pytest.mark.parametrize(
    "old, new",
    [
        ("RATE = 0.5", "RATE = 0.25"),
        ("first line\n\nthird", "first line\nthird"),  # a blank line inside a string is data
        ("first line\n", "first line  \n"),  # so is trailing space inside a string
        ("# not a comment", "# not a comment!"),  # a hash sign inside a string
        (":.3f}", ":.4f}"),
        ("        return", "        x = -x\n        return"),
        ("math.log(a) - math", "math.log(a) + math"),
    ],
    ids=[
        "number",
        "blank-in-string",
        "space-in-string",
        "hash-in-string",
        "f-string",
        "line",
        "op",
    ],
)
def test_every_other_edit_changes_the_hash(tmp_path, old, new):
    assert old in MODULE
    assert hash_of(tmp_path, MODULE.replace(old, new, 1)) != hash_of(tmp_path, MODULE)


def test_a_file_edited_in_the_same_process_is_hashed_again(tmp_path):
    """Even an edit that keeps the file's size and modification time (what the import cache
    looks at) is seen: the hash follows the contents."""
    path = tmp_path / "module.py"
    path.write_text("RATE = 0.5\n")
    stat = path.stat()
    before = files_hash([path])
    path.write_text("RATE = 0.7\n")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert files_hash([path]) != before


LAYOUT = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}


def tokens(text: str) -> list[tuple[int, str]]:
    found = tokenize.generate_tokens(io.StringIO(text).readline)
    return [(t.type, t.string) for t in found if t.type not in LAYOUT]


def test_a_module_python_imports_is_hashed_whatever_its_encoding_or_newlines(tmp_path):
    """A strategy module of one's own saved with a byte-order mark, in Latin-1 under a coding
    declaration, or with Windows newlines: Python imports each, and each hashes as its code."""
    code = 'import math\nNAME = "\u00e9t\u00e9"  # summer\n'
    variants = {
        "utf-8": code.encode(),
        "bom": b"\xef\xbb\xbf" + code.encode(),
        "crlf": code.replace("\n", "\r\n").encode(),
        "latin-1": ("# -*- coding: latin-1 -*-\n" + code).encode("latin-1"),
    }
    hashes = {}
    for name, raw in variants.items():
        path = tmp_path / name / "module.py"
        path.parent.mkdir()
        path.write_bytes(raw)
        hashes[name] = files_hash([path])
    # the declaration is a comment; the text Python runs is the same in all four
    assert len(set(hashes.values())) == 1, hashes
    changed = tmp_path / "changed" / "module.py"
    changed.parent.mkdir()
    changed.write_bytes(b"\xef\xbb\xbf" + code.replace("\u00e9t\u00e9", "hiver").encode())
    assert files_hash([changed]) != hashes["utf-8"]


def test_what_is_hashed_is_every_token_but_comments_and_docstrings():
    """For every source file of the package: the tokens of the hashed text are the file's tokens,
    less its comments and its docstrings (found apart, by the syntax tree), in the same order."""
    documented = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        source = path.read_text()
        lines = source.splitlines(keepends=True)
        docstrings = set()  # where each docstring starts, as tokenize counts (characters)
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, documented) and ast.get_docstring(node, clean=False) is not None:
                first = node.body[0]
                column = len(lines[first.lineno - 1].encode()[: first.col_offset].decode())
                docstrings.add((first.lineno, column))
        expected = [
            (t.type, t.string)
            for t in tokenize.generate_tokens(io.StringIO(source).readline)
            if t.type not in LAYOUT and t.start not in docstrings
        ]
        assert tokens(code_text(source)) == expected, path


def test_the_pattern_finds_the_strings_and_comments_the_tokenizer_finds():
    """On every source file of the package; a string's span starts at its quote in the pattern's
    scan, at its prefix (f, r, b) in the tokenizer's, on the same row."""
    if sys.version_info >= (3, 12):
        # 3.12.1's tokenizer, for one, ends a multi-line string that holds a non-ASCII character
        # early, by the character's extra bytes (the string's rows, all the hash uses, are right)
        pytest.skip(
            "the pattern is Python 3.11's grammar, which 3.11's tokenizer checks; 3.12 "
            "and later hash by their own tokenizer"
        )
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        source = path.read_text()
        comments, strings = scan_by_pattern(source)
        token_comments, token_strings = scan_by_tokens(source)
        assert comments == token_comments, path
        assert len(strings) == len(token_strings), path
        for (start, end), (token_start, token_end) in zip(strings, token_strings, strict=True):
            assert end == token_end and start[0] == token_start[0], (path, start, token_start)
            assert 0 <= start[1] - token_start[1] <= 2, (path, start, token_start)


def test_a_string_at_the_end_of_a_file_without_a_newline():
    assert scan_by_pattern("x = 'a'") == scan_by_tokens("x = 'a'") == ([], [((1, 4), (1, 7))])
    assert code_text("x = 'a'  # the end") == "x = 'a'"


def other_pythons() -> list[str]:
    """Pythons 3.11-3.13 other than this one: on PATH, or installed by pyenv."""
    ours = f"{sys.version_info.major}.{sys.version_info.minor}"
    pyenv = shutil.which("pyenv")
    root = subprocess.run([pyenv, "root"], capture_output=True, text=True).stdout if pyenv else ""
    found = []
    for version in ("3.11", "3.12", "3.13"):
        if version == ours:
            continue
        candidates = [shutil.which(f"python{version}")]
        if root.strip():
            candidates += sorted(Path(root.strip()).glob(f"versions/{version}.*/bin/python"))
        for exe in filter(None, candidates):
            if subprocess.run([exe, "-c", "pass"], capture_output=True).returncode == 0:
                found.append(str(exe))
                break
    return found


def test_every_supported_python_hashes_the_package_alike():
    """fedkd.provenance and fedkd.code_text need only the standard library, so another Python
    imports them from the source tree. Python 3.11 scans strings and comments with a pattern,
    3.12 and later with their tokenizer."""
    pythons = other_pythons()
    if not pythons:
        pytest.skip("no other Python 3.11-3.13 on PATH or under pyenv to compare with")
    script = (
        "import json, sys\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "from fedkd.provenance import PACKAGE_DIR, files_hash\n"
        "files = sorted(PACKAGE_DIR.rglob('*.py'))\n"
        "print(json.dumps({str(f): files_hash([f]) for f in files}))\n"
    )
    ours = {str(f): files_hash([f]) for f in sorted(PACKAGE_DIR.rglob("*.py"))}
    for exe in pythons:
        proc = subprocess.run(
            [exe, "-c", script, str(PACKAGE_DIR.parent)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        theirs = json.loads(proc.stdout)
        differ = sorted(Path(f).name for f in ours if theirs.get(f) != ours[f])
        assert not differ, f"{exe} hashes these files otherwise: {differ}"


WHAT_A_RUN_LOADS = """
import json, sys
from pathlib import Path
from fedkd import cli
cli.main(["train", "--out", sys.argv[1], *sys.argv[2:]])
print(json.dumps(sorted(
    str(Path(m.__file__).resolve()) for name, m in list(sys.modules.items())
    if name.split(".")[0] == "fedkd" and getattr(m, "__file__", None)
)))
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "strategy, dataset, model",
    [
        ("fedavg", "mnist5k", "cnn"),
        ("fedgkd", "mnist5k", "resnet8"),
        ("fedprox", "synthtext", "auto"),
    ],
)
def test_every_module_a_run_loads_is_in_its_code_hash(tmp_path, strategy, dataset, model):
    """What a run really imports, however it imports it (the models inside a function, a loader
    by name), is hashed with it, so editing it re-runs the run. Loaded besides: the command line
    and its flags' help, its error reporting and data check, and the other strategies' modules, which the registry
    imports to look a name up, and the command's imports made before it runs (fedkd.startup)."""
    from fedkd.provenance import PACKAGE_DIR, _closure, run_code_files, strategy_module_files

    args = ["--strategy", strategy, "--dataset", dataset, "--model", model, "--rounds", "1",
            "--clients", "10", "--participation", "0.1", "--device", "cpu"]  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-c", WHAT_A_RUN_LOADS, str(tmp_path / "run"), *args],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    loaded = {Path(f) for f in json.loads(out.stdout.splitlines()[-1])}
    hashed = set(run_code_files(strategy, dataset))
    registry = set(_closure(list(strategy_module_files().values())))
    command = {PACKAGE_DIR / f for f in ("cli.py", "run_key_help.py", "user_errors.py",
                                         "startup.py", "pipeline/__init__.py",
                                         "pipeline/data_check.py")}  # fmt: skip
    assert loaded - hashed - registry - command == set()
    model_file = {"cnn": "cnn.py", "resnet8": "resnet.py", "auto": "text.py"}[model]
    assert PACKAGE_DIR / "models" / model_file in loaded & hashed


def test_a_library_on_pythonpath_is_not_hashed_as_code_of_ones_own(tmp_path, monkeypatch):
    """A strategy of one's own is hashed with its own helper files, not with a library it
    imports from a folder on PYTHONPATH (`pip install --target`, a cluster's module system): a
    library is versioned, and its upgrade re-runs nothing."""
    from fedkd.provenance import run_code_files
    from fedkd.strategies import MODULES_VARIABLE
    from test_toy_strategy import TOY_MODULE

    libs, own = tmp_path / "libs", tmp_path / "own"
    (libs / "fancylib").mkdir(parents=True)
    (libs / "fancylib" / "__init__.py").write_text("SCALE = 0.5\n")
    (libs / "fancylib-1.0.dist-info").mkdir()
    (libs / "fancylib-1.0.dist-info" / "METADATA").write_text("Name: fancylib\nVersion: 1.0\n")
    (libs / "fancylib-1.0.dist-info" / "top_level.txt").write_text("fancylib\n")
    own.mkdir()
    (own / "toy_helper.py").write_text("def half(x):\n    return 0.5 * x\n")
    module = own / "libtoy.py"
    module.write_text(
        TOY_MODULE.replace("import torch\n", "import fancylib\nimport torch\nimport toy_helper\n")
    )
    monkeypatch.syspath_prepend(str(libs))
    monkeypatch.syspath_prepend(str(own))
    monkeypatch.setenv(MODULES_VARIABLE, str(module))
    files = run_code_files("toy-shrink", "mnist5k")
    assert own / "toy_helper.py" in files
    assert not [f for f in files if "fancylib" in f.parts], files


def test_a_package_installed_editable_is_code_of_ones_own(tmp_path, monkeypatch):
    """`pip install -e` leaves its code where it is edited: PEP 610's direct_url.json says
    "editable", and such a package is hashed as code of one's own, not kept out as a library."""
    import json

    from fedkd import provenance

    libs = tmp_path / "libs"
    for name, editable in (("mywork", True), ("fancylib", False)):
        (libs / name).mkdir(parents=True)
        (libs / name / "__init__.py").write_text("SCALE = 0.5\n")
        info = libs / f"{name}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Name: {name}\nVersion: 1.0\n")
        (info / "top_level.txt").write_text(f"{name}\n")
        url = {"url": f"file://{libs / name}", "dir_info": {"editable": editable}}
        (info / "direct_url.json").write_text(json.dumps(url))
    monkeypatch.syspath_prepend(str(libs))
    libraries = provenance._distributed_modules(("a path of its own", str(libs)))
    assert "fancylib" in libraries and "mywork" not in libraries
