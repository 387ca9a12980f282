import pytest

import aitrinity


def test_root_exposes_the_curated_entry_points():
    d = aitrinity.diagnose("trillion-param-training")
    assert d.binding == "capacity:hbm"
    assert aitrinity.resolve("llama-70b-training-h100").model.name == "llama-3.1-70b"
    assert callable(aitrinity.ledger) and callable(aitrinity.estimate)
    from aitrinity import api

    assert callable(api.plan)
    with pytest.raises(AttributeError):
        _ = aitrinity.no_such_thing
