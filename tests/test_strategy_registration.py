"""A strategy module of one's own is refused when it registers, naming the class, what is wrong
and the fix, for what would otherwise fail late or silently: a parameter without a default, a
hook the engine cannot call or a name nearly a hook's, a state saved but never loaded, and
batched = False without a reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedkd.strategies import MODULES_VARIABLE, StrategyModuleError, strategy_names
from test_toy_strategy import TOY_MODULE

LOCAL_LOSS = "    def local_loss(self, batch: LocalBatch, ctx: LocalContext) -> torch.Tensor:"


def with_methods(methods: str) -> str:
    """The toy module with ``methods`` (source text) defined before its local_loss."""
    assert TOY_MODULE.count(LOCAL_LOSS) == 1
    return TOY_MODULE.replace(LOCAL_LOSS, methods + LOCAL_LOSS)


def refusal(tmp_path: Path, monkeypatch, name: str, text: str) -> str:
    """The registry's refusal of the module ``text``, registered as ``name``."""
    module = tmp_path / name
    module.write_text(text)
    monkeypatch.setenv(MODULES_VARIABLE, str(module))
    with pytest.raises(StrategyModuleError) as refused:
        strategy_names()
    return str(refused.value)


def test_a_parameter_without_a_default_is_refused_when_registered(tmp_path, monkeypatch):
    """Every parameter needs the paper's default: without one `fedkd strategies` printed
    dataclasses' MISSING object as its default and every run failed in a traceback."""
    text = TOY_MODULE.replace(
        "    decay: float = ranged(", "    rate: float\n    decay: float = ranged("
    )
    message = refusal(tmp_path, monkeypatch, "nodefault.py", text)
    assert "strategy 'toy-shrink'" in message and "params.rate has no default" in message
    assert "ranged(default" in message and "nodefault.py" in message, message


def test_a_hook_with_the_wrong_parameters_is_refused_when_registered(tmp_path, monkeypatch):
    """A hook the engine cannot call (aggregate without its round) failed only after the first
    round's clients had trained, in a traceback."""
    aggregate = (
        "    def aggregate(self, global_model, updates):\n"
        "        return super().aggregate(0, global_model, updates)\n\n"
    )
    message = refusal(tmp_path, monkeypatch, "wronghook.py", with_methods(aggregate))
    assert "strategy 'toy-shrink': its aggregate(self, global_model, updates)" in message
    assert "aggregate(self, round, global_model, updates)" in message, message


def test_a_state_saved_but_never_loaded_is_refused_when_registered(tmp_path, monkeypatch):
    """A state_dict without its load_state_dict was checkpointed every round and dropped on
    resume: the resumed run went on from an empty state and ended with other numbers."""
    state_dict = '    def state_dict(self):\n        return {"seen": 1}\n\n'
    message = refusal(tmp_path, monkeypatch, "saveonly.py", with_methods(state_dict))
    assert "strategy 'toy-shrink' defines state_dict but not load_state_dict" in message, message
    assert "a resumed run" in message, message


def test_hooks_callable_on_the_instance_are_registered(tmp_path, monkeypatch):
    """A hook the engine can call on the strategy, a staticmethod, a classmethod or a property
    giving a function, registers: the check refuses only what the engine's call would fail on."""
    module = tmp_path / "statichooks.py"
    hooks = (
        "    @staticmethod\n    def client_end(client):\n        return {}\n\n"
        "    @classmethod\n    def server_update(cls, round, global_model, updates):\n"
        "        return {}\n\n"
        "    @property\n    def client_begin(self):\n        return lambda client: None\n\n"
    )
    module.write_text(with_methods(hooks))
    monkeypatch.setenv(MODULES_VARIABLE, str(module))
    assert "toy-shrink" in strategy_names()


@pytest.mark.parametrize(
    "misspelt, hook", [("clent_begin", "client_begin"), ("server_updates", "server_update")]
)
def test_a_hook_misspelt_is_refused_when_registered(tmp_path, monkeypatch, misspelt, hook):
    """A method named nearly as a hook was never called: the strategy trained as FedAvg there,
    and its table read as though the method had run."""
    method = f"    def {misspelt}(self, *args):\n        return {{}}\n\n"
    message = refusal(tmp_path, monkeypatch, "misspelt.py", with_methods(method))
    assert f"strategy 'toy-shrink' defines '{misspelt}', which the engine never calls" in message
    assert f"did you mean the hook {hook}?" in message and "misspelt.py" in message, message


def test_a_helper_unlike_any_hook_is_registered(tmp_path, monkeypatch):
    """Only a name near a hook's is refused: a helper of the strategy's own registers."""
    module = tmp_path / "helpers.py"
    helpers = "    def shrink_factor(self):\n        return 1.0\n\n    def _client_begin(self):\n        pass\n\n"
    module.write_text(with_methods(helpers))
    monkeypatch.setenv(MODULES_VARIABLE, str(module))
    assert "toy-shrink" in strategy_names()


def test_batched_false_without_a_reason_is_refused_when_registered(tmp_path, monkeypatch):
    """A strategy the batched trainer cannot train says why: without a reason its runs said
    only that the strategy declares batched = False, and a reader could not tell a limit of the
    loss from a slip."""
    text = with_methods("    batched = False\n\n")
    message = refusal(tmp_path, monkeypatch, "noreason.py", text)
    assert "strategy 'toy-shrink' declares batched = False without a batched_reason" in message
    reasoned = tmp_path / "reasoned.py"
    reasoned.write_text(
        with_methods('    batched = False\n    batched_reason = "draws random numbers"\n\n')
    )
    monkeypatch.setenv(MODULES_VARIABLE, str(reasoned))
    assert "toy-shrink" in strategy_names()
