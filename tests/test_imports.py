"""Imports flow one way: no cycle between fedkd's modules (imports inside functions count too),
and strategies build on ``fedkd.runtime``, never on the engine."""

import ast
from pathlib import Path

SRC = Path(__file__).parents[1] / "src"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def import_graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in SRC.rglob("*.py")}
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
