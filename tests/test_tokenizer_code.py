"""A tokenizer folder that ships Python is refused at once: its code never runs and no prompt
waits for an answer (transformers asks `[y/N]` for 15 s unless trust_remote_code is given)."""

import builtins
import json

import pytest

from fedkd.data.base import DatasetNotFoundError
from fedkd.data.text import HFTokenizer

pytest.importorskip("transformers")


def test_a_tokenizer_folder_with_code_is_refused_without_running_it(tmp_path, monkeypatch):
    folder = tmp_path / "tok"
    folder.mkdir()
    ran = tmp_path / "code-ran"
    (folder / "tokenization_planted.py").write_text(
        f"open({str(ran)!r}, 'w').write('ran')\n"
        "from transformers import PreTrainedTokenizer\n"
        "class PlantedTokenizer(PreTrainedTokenizer):\n"
        "    pass\n"
    )
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "auto_map": {"AutoTokenizer": ["tokenization_planted.PlantedTokenizer", None]},
                "tokenizer_class": "PlantedTokenizer",
            }
        )
    )
    (folder / "config.json").write_text(json.dumps({"model_type": "planted"}))

    def no_prompt(*args, **kwargs):
        raise AssertionError(f"a prompt was shown: {args}")

    monkeypatch.setattr(builtins, "input", no_prompt)
    with pytest.raises(DatasetNotFoundError, match="ships its own code, which fedkd does not run"):
        HFTokenizer(str(folder), download=False)
    assert not ran.exists()
