"""Strategy registry: every module in this package (not starting with ``_``) that defines a
``Strategy`` subclass with a ``name`` registers it, and so does every Python file named in the
environment variable FEDKD_STRATEGY_MODULES (a strategy of one's own, kept outside the package;
docs/adding-a-strategy.md). Adding a strategy = adding one module.

Only files the user names there are imported: a strategy's name, in a configuration or on the
command line, is looked up among the registered ones and never imports anything itself. Importing
this package does not import torch (the report reads the modules without importing them).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import pkgutil
import sys
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from fedkd.echo import PATH_CHARS, safe_text, shown

if TYPE_CHECKING:
    from fedkd.strategies.base import Strategy

# a strategy module of one's own: a Python file, or several separated by os.pathsep (":")
MODULES_VARIABLE = "FEDKD_STRATEGY_MODULES"
STRATEGIES_DIR = Path(__file__).resolve().parent


class StrategyModuleError(ValueError):
    """A strategy module of one's own that cannot be registered: it fails (or exits) while it is
    imported, or declares a name or a published-code choice wrongly. Said in one line."""


def package_module_names() -> list[str]:
    """The package's strategy modules (``fedprox``, ...), without importing them."""
    return [
        info.name
        for info in pkgutil.iter_modules([str(STRATEGIES_DIR)])
        if not info.name.startswith("_") and info.name != "base"
    ]


def external_module_files() -> list[Path]:
    """The files FEDKD_STRATEGY_MODULES names, resolved; a missing one or one that is not a
    Python file is refused by name."""
    files = []
    for entry in os.environ.get(MODULES_VARIABLE, "").split(os.pathsep):
        if not entry.strip():
            continue
        path = Path(entry).expanduser().resolve()
        if path.suffix != ".py" or not path.is_file():
            problem = (
                "is not a Python file (.py)"
                if path.suffix != ".py"
                else f"does not exist (resolved to {shown(str(path), PATH_CHARS)})"
            )
            raise StrategyModuleError(
                f"{MODULES_VARIABLE} names {shown(entry, PATH_CHARS)}, which {problem}; set it to the files of "
                f"your own strategy modules, separated by {os.pathsep!r}"
            )
        if path not in files:
            files.append(path)
    return files


def module_files() -> list[Path]:
    """Every strategy module's file: the package's, then those of FEDKD_STRATEGY_MODULES."""
    return [STRATEGIES_DIR / f"{name}.py" for name in package_module_names()] + (
        external_module_files()
    )


def _import_external(path: Path):
    """A module of one's own, imported from its file under a name of its own (dataclasses look a
    class's module up in sys.modules). The name carries a digest of the path, so two files named
    alike are two modules."""
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:8]
    name = f"fedkd_strategy_module_{path.stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise StrategyModuleError(
            f"{MODULES_VARIABLE}: {shown(str(path), PATH_CHARS)} cannot be imported as a module"
        )
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except KeyboardInterrupt:  # Ctrl-C while importing: the user's own stop
        del sys.modules[name]
        raise
    except BaseException as exc:  # noqa: BLE001 (sys.exit() too: it would end fedkd silently)
        del sys.modules[name]
        raise StrategyModuleError(
            f"{MODULES_VARIABLE}: the strategy module {safe_text(path, None)} failed while being "
            f"imported: {import_failure(exc, path)}; fix it, or remove it from {MODULES_VARIABLE}"
        ) from None
    return module


def import_failure(exc: BaseException, path: Path) -> str:
    """What went wrong importing the module at ``path``, in a few words, with the line of that
    file where it happened."""
    if isinstance(exc, SystemExit):
        what = f"it calls sys.exit({shown(exc.code, 40)}) (a module must not end the program)"
    elif isinstance(exc, SyntaxError):
        where = "" if exc.filename == str(path) else f" of {safe_text(exc.filename, None)}"
        return f"SyntaxError at line {exc.lineno}{where}: {safe_text(exc.msg)}"
    else:
        lines = str(exc).splitlines()
        text = lines[0] + (" ..." if len(lines) > 1 else "") if lines else ""
        what = f"{type(exc).__name__}" + (f": {safe_text(text)}" if text else "")
    line = None
    tb = exc.__traceback__
    while tb is not None:  # the deepest frame in the module's own file
        if Path(tb.tb_frame.f_code.co_filename) == path:
            line = tb.tb_lineno
        tb = tb.tb_next
    return what + (f" (line {line})" if line is not None else "")


def _code_choice_errors(cls: type[Strategy]) -> list[str]:
    """A published-code choice must be a parameter whose default is the one it declares."""
    import dataclasses

    defaults = {f.name: f.default for f in dataclasses.fields(cls.Params)}
    return [
        f"strategy {shown(cls.name)} declares code_choices[{shown(key)}] = {shown(default)}, but "
        "its Params "
        + (
            f"default is {shown(defaults[key])}; make them the same"
            if key in defaults
            else "has no such parameter"
        )
        for key, default in cls.code_choices.items()
        if defaults.get(key, object()) != default
    ]


def _param_default_errors(cls: type[Strategy]) -> list[str]:
    """Every parameter needs a default: runs take the paper's values without naming them all."""
    import dataclasses

    return [
        f"strategy {shown(cls.name)}: params.{f.name} has no default; give each parameter the "
        f'paper\'s, e.g. {f.name}: float = ranged(default, at_least(0), "what it means")'
        for f in dataclasses.fields(cls.Params)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]


# what the engine calls on a strategy, and how (fedkd.strategies.base)
HOOKS = (
    "dataset_defaults",
    "payload",
    "client_begin",
    "local_loss",
    "client_end",
    "aggregate",
    "server_update",
    "state_dict",
    "load_state_dict",
)


def _hook_errors(cls: type[Strategy]) -> list[str]:
    """A hook the engine could not call with its arguments: said when the module registers, not
    after a round's clients have trained."""
    import inspect

    from fedkd.strategies.base import Strategy

    errors = []
    for hook in HOOKS:
        found = inspect.getattr_static(cls, hook)
        if getattr(cls, hook) is getattr(Strategy, hook) or isinstance(found, property):
            continue  # a property's function is known only on an instance
        expected = inspect.signature(getattr(Strategy, hook))
        try:
            own = inspect.signature(getattr(cls, hook))
        except (TypeError, ValueError):  # not a function: called, it would fail the same way
            errors.append(f"strategy {shown(cls.name)}: its {hook} is not a method")
            continue
        arguments = list(expected.parameters)
        if hook != "dataset_defaults" and isinstance(found, (staticmethod, classmethod)):
            # called on an instance, whose self such a method does not take
            arguments = arguments[1:]
        try:
            own.bind(*arguments)
        except TypeError:
            errors.append(
                f"strategy {shown(cls.name)}: its {hook}{_shown_signature(own)} cannot be called "
                f"as the engine calls it, {hook}{_shown_signature(expected)}; give it those "
                "parameters (fedkd/strategies/base.py)"
            )
    return errors


def _misspelt_hook_errors(cls: type[Strategy]) -> list[str]:
    """A method named nearly as a hook (``clent_begin``, ``server_updates``) is never called: the
    strategy would train as FedAvg there without a word."""
    import difflib

    from fedkd.strategies.base import Strategy

    errors = []
    for klass in cls.__mro__[: cls.__mro__.index(Strategy)]:
        for attr in vars(klass):
            if attr.startswith("_") or attr in HOOKS or hasattr(Strategy, attr):
                continue
            near = difflib.get_close_matches(attr, HOOKS, n=1, cutoff=0.8)
            if near:
                errors.append(
                    f"strategy {shown(cls.name)} defines {shown(attr)}, which the engine never "
                    f"calls; did you mean the hook {near[0]}? (fedkd/strategies/base.py lists "
                    "them; a helper of your own wants a name unlike a hook's, or a leading _)"
                )
    return errors


def _batched_reason_errors(cls: type[Strategy]) -> list[str]:
    """A strategy the batched trainer cannot train says why: the reason is what run.json and the
    job's log give for a run that trained sequentially where the batched trainer was asked for."""
    if cls.batched or (isinstance(cls.batched_reason, str) and cls.batched_reason.strip()):
        return []
    return [
        f"strategy {shown(cls.name)} declares batched = False without a batched_reason; say in "
        'one line why its local_loss cannot run batched, e.g. batched_reason = "draws random '
        'numbers in local_loss"'
    ]


def _state_errors(cls: type[Strategy]) -> list[str]:
    """A checkpoint's state is saved by state_dict and put back by load_state_dict: one without
    the other loses the state on resume, silently."""
    from fedkd.strategies.base import Strategy

    own = [
        h for h in ("state_dict", "load_state_dict") if getattr(cls, h) is not getattr(Strategy, h)
    ]
    if len(own) != 1:
        return []
    other = "load_state_dict" if own[0] == "state_dict" else "state_dict"
    return [
        f"strategy {shown(cls.name)} defines {own[0]} but not {other}: a resumed run would go on "
        "without the state the checkpoint holds; define both (or neither, for a strategy that "
        "keeps nothing between rounds)"
    ]


def _shown_signature(signature) -> str:
    return "(" + ", ".join(signature.parameters) + ")"


@cache
def _registry_of(external: tuple[Path, ...]) -> dict[str, type[Strategy]]:
    from fedkd.strategies.base import Strategy

    modules = [importlib.import_module(f"{__name__}.{m}") for m in package_module_names()]
    modules += [_import_external(path) for path in external]
    found: dict[str, type[Strategy]] = {}
    for module in modules:
        for obj in vars(module).values():
            if (
                isinstance(obj, type)
                and issubclass(obj, Strategy)
                and obj.name
                and obj.__module__ == module.__name__
            ):
                if not isinstance(obj.name, str):
                    raise StrategyModuleError(
                        f"strategy class {obj.__qualname__} of {safe_text(module.__file__, None)} "
                        f"has the name {shown(obj.name)}; a strategy's name is text"
                    )
                if obj.name in found:
                    raise StrategyModuleError(
                        f"strategy name {shown(obj.name)} is registered twice "
                        f"({safe_text(module.__file__, None)} and "
                        f"{safe_text(sys.modules[found[obj.name].__module__].__file__, None)}); "
                        "rename one"
                    )
                problems = _code_choice_errors(obj) + _param_default_errors(obj)
                problems += _hook_errors(obj) + _misspelt_hook_errors(obj) + _state_errors(obj)
                problems += _batched_reason_errors(obj)
                if problems:
                    where = safe_text(module.__file__, None)
                    raise StrategyModuleError(f"{where}: " + "; ".join(problems))
                found[obj.name] = obj
    return dict(sorted(found.items()))


def _registry() -> dict[str, type[Strategy]]:
    # keyed by the files named now: a process that changes FEDKD_STRATEGY_MODULES (a test) sees
    # the strategies it names
    return _registry_of(tuple(external_module_files()))


def strategy_names() -> list[str]:
    return list(_registry())


def choose_a_strategy() -> str:
    """What to do about a strategy name that is not registered."""
    return (
        f"choose one of: {', '.join(_registry())} (a strategy of your own: name its module's "
        f"file in {MODULES_VARIABLE}, see docs/adding-a-strategy.md)"
    )


def get_strategy_class(name: str) -> type[Strategy]:
    reg = _registry()
    if name not in reg:
        raise ValueError(f"unknown strategy {name!r}; {choose_a_strategy()}")
    return reg[name]
