"""What the report reads of each registered strategy: its class's name, the name it declares for
tables (``display_name``) and its published-code choices (``code_choices``), read from the source
of its module without importing it. The strategies import torch; a table or a caption need not,
and so a render job starts in a fraction of the time.

The registry (fedkd.strategies) says which modules hold strategies, FEDKD_STRATEGY_MODULES
included. A class counts when it derives from ``Strategy`` and has a ``name``, as the registry
counts it; a value it inherits is looked up in the class it derives from, in its own module or
imported from one of the package's. The two values must be literals in the class body
(``display_name = "FedGKD+"``, ``code_choices = {"m1_teacher": "current"}``): anything else is
refused by name. tests/test_toy_strategy.py holds this reading to what importing gives.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from fedkd.strategies import MODULES_VARIABLE, STRATEGIES_DIR, module_files

READ = ("name", "display_name", "code_choices")


@dataclass(frozen=True)
class DeclaredStrategy:
    name: str
    class_name: str
    display_name: str = ""  # "": the class's name is shown
    code_choices: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Class:
    name: str
    path: Path
    bases: list[tuple[Path | None, str]]  # (module file, class name); None: not a fedkd module
    # the expressions assigned to the names read; evaluated only for a strategy (a helper class
    # may compute its own ``name``)
    assigned: dict[str, ast.expr]

    def literal(self, key: str) -> Any:
        where = f"{self.path.name}: {self.name}.{key}"
        try:
            return ast.literal_eval(self.assigned[key])
        except ValueError:
            raise ValueError(
                f"{where} must be a literal (a string, or a dict of parameter names to values) "
                "written in the class body: the report reads it without importing the module"
            ) from None


def _package_file(module: str) -> Path | None:
    """The file of a ``fedkd.strategies`` module (base and private ones included), else None."""
    prefix = "fedkd.strategies."
    if not module.startswith(prefix):
        return None
    path = STRATEGIES_DIR / f"{module[len(prefix) :]}.py"
    return path if path.is_file() else None


def _classes(path: Path) -> dict[str, _Class]:
    tree = ast.parse(path.read_text(), filename=str(path))
    local = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    imported: dict[str, tuple[Path | None, str]] = {}  # a name → (its module's file, class)
    modules: dict[str, str] = {}  # a name → the module it stands for ("import ... as b")
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                imported[alias.asname or alias.name] = (_package_file(node.module), alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                modules[alias.asname or alias.name] = alias.name
    found = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        bases = []
        for base in node.bases:
            if isinstance(base, ast.Name):
                in_module = base.id in local
                bases.append((path, base.id) if in_module else imported.get(base.id, (None, "")))
            elif isinstance(base, ast.Attribute):  # b.Strategy, fedkd.strategies.base.Strategy
                module = ast.unparse(base.value)
                bases.append((_package_file(modules.get(module, module)), base.attr))
        assigned = {}
        for stmt in node.body:
            target = value = None
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                target, value = stmt.targets[0], stmt.value
            elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
                target, value = stmt.target, stmt.value
            if isinstance(target, ast.Name) and target.id in READ:
                assigned[target.id] = value
        found[node.name] = _Class(node.name, path, bases, assigned)
    return found


class _Reader:
    def __init__(self) -> None:
        self.modules: dict[Path, dict[str, _Class]] = {}

    def classes(self, path: Path) -> dict[str, _Class]:
        if path not in self.modules:
            self.modules[path] = _classes(path)
        return self.modules[path]

    def cls(self, path: Path | None, name: str) -> _Class | None:
        return None if path is None else self.classes(path).get(name)

    def is_strategy(self, c: _Class, seen: frozenset = frozenset()) -> bool:
        if c.name == "Strategy" and c.path == STRATEGIES_DIR / "base.py":
            return True
        return any(
            base is not None and base.name not in seen and self.is_strategy(base, seen | {c.name})
            for base in (self.cls(*b) for b in c.bases)
        )

    def value(self, c: _Class, key: str, default: Any) -> Any:
        """``key`` of the class, else of the first base that sets it, depth first (Python's
        order where each class has one base)."""
        if key in c.assigned:
            return c.literal(key)
        for base in (self.cls(*b) for b in c.bases):
            if base is not None:
                found = self.value(base, key, None)
                if found is not None:
                    return found
        return default


@cache
def _declared(modules_variable: str) -> dict[str, DeclaredStrategy]:
    reader = _Reader()
    found = {}
    for path in module_files():
        for c in reader.classes(path).values():
            if "name" not in c.assigned or not reader.is_strategy(c):
                continue
            name = c.literal("name")
            if name:
                found[name] = DeclaredStrategy(
                    name=name,
                    class_name=c.name,
                    display_name=reader.value(c, "display_name", ""),
                    code_choices=dict(reader.value(c, "code_choices", {})),
                )
    return dict(sorted(found.items()))


def declared_strategies() -> dict[str, DeclaredStrategy]:
    """Every registered strategy's declarations, by its name."""
    # read once per process, and again where FEDKD_STRATEGY_MODULES changes (a test)
    return _declared(os.environ.get(MODULES_VARIABLE, ""))
