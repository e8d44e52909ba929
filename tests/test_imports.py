"""Imports flow one way: no cycle between fedkd's modules (imports inside functions count too),
and strategies build on ``fedkd.runtime``, never on the engine."""

import ast
from pathlib import Path

SRC = Path(__file__).parents[1] / "src"


def module_name(path: Path, src: Path = SRC) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def import_graph(src: Path = SRC) -> dict[str, set[str]]:
    modules = {module_name(p, src): p for p in src.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                # "from pkg import mod" imports the module when there is one
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                    for a in node.names
                ]
            for t in targets:
                while t and t not in modules:
                    t = t.rpartition(".")[0]
                if t and t != mod and t.startswith("fedkd"):
                    graph[mod].add(t)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    graph = import_graph()
    # a package imports its own modules (re-exports, registries): not a cycle between layers
    for mod in graph:
        graph[mod] = {t for t in graph[mod] if not (mod and t.startswith(mod + "."))}
    assert cycles(graph) == []


def test_strategies_do_not_import_the_engine():
    graph = import_graph()
    offenders = {
        m: sorted(t for t in deps if t.startswith("fedkd.engine"))
        for m, deps in graph.items()
        if m.startswith("fedkd.strategies")
    }
    assert {m: d for m, d in offenders.items() if d} == {}


def test_the_checker_sees_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c"]]


def test_the_graph_holds_every_kind_of_import(tmp_path):
    """Absolute, relative (one and two levels up), ``from package import module``, and an import
    inside a function: a cycle closed by the last one is found."""
    files = {
        "__init__.py": "",
        "a.py": "from fedkd import b\n",
        "b.py": "def later():\n    from .sub import c\n",
        "d.py": "import fedkd.sub.c as c\nimport os\n",
        "sub/__init__.py": "",
        "sub/c.py": "from ..a import name\n",
    }
    for name, text in files.items():
        path = tmp_path / "fedkd" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    graph = import_graph(tmp_path)
    assert graph == {
        "fedkd": set(), "fedkd.a": {"fedkd.b"}, "fedkd.b": {"fedkd.sub.c"},
        "fedkd.d": {"fedkd.sub.c"}, "fedkd.sub": set(), "fedkd.sub.c": {"fedkd.a"},
    }  # fmt: skip
    assert cycles(graph) == [["fedkd.a", "fedkd.b", "fedkd.sub.c"]]
