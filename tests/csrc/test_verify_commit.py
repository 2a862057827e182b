"""The verify pass and its commit (csrc/runtime/seq_cache.h; docs/runtime.md, draft-MTP round): verify(tokens) evaluates
rows provisionally, commit(n_keep) keeps a prefix and rolls the sequence cache back past it without replay. The
state after any commit equals evaluating the kept tokens serially; nothing else runs while a pass is pending."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import new_sequence, random_tokens

PROMPT = random_tokens(40, seed=3)  # index_topk is 16: past it
ROWS = random_tokens(5, seed=4)


@pytest.fixture(scope="module")
def gguf(checkpoints):
    return checkpoints.convert(checkpoints.make("verify-tiny", "tiny", dtype="f32"), outtype="f32")


def engine(gguf):
    """A sequence of 128 rows in ubatches of 16 on an engine of its own."""
    from glm5next_runtime import _core
    return new_sequence(_core.Model(str(gguf), []), 128, 16, 2)


def kda_layers(gguf) -> list[int]:
    from glm5next_runtime import _core
    hp = _core.Model(str(gguf), []).hparams
    return [il for il, kv in enumerate(hp["head_count_kv"][: hp["n_trunk"]]) if kv == 0]  # KDA: no KV heads


@pytest.mark.parametrize("n_keep", [1, 2, 4, 5])
def test_commit_leaves_the_state_of_serial_decoding(gguf, n_keep):
    spec, serial = engine(gguf), engine(gguf)
    spec.eval(PROMPT)
    serial.eval(PROMPT)
    verified = spec.verify(ROWS)
    spec.commit(n_keep)
    rows = serial.eval(ROWS[:n_keep], True)
    np.testing.assert_allclose(verified["logits"][:n_keep], rows["logits"], rtol=0, atol=1e-4)
    assert spec.n_past == serial.n_past == len(PROMPT) + n_keep
    assert spec.tokens == serial.tokens
    layers = kda_layers(gguf)
    assert layers, "the tiny preset has KDA layers"
    for il in layers:
        a, b = spec.kda_state(il), serial.kda_state(il)
        assert np.abs(a["conv"] - b["conv"]).max() <= 1e-5
        assert np.abs(a["state"] - b["state"]).max() <= 1e-5
    # and the sequence goes on the same: the rows after the commit see the rolled-back caches
    nxt = random_tokens(3, seed=5)
    np.testing.assert_allclose(spec.eval(nxt, True)["logits"], serial.eval(nxt, True)["logits"], rtol=0, atol=1e-4)


def test_nothing_runs_while_a_verify_pass_awaits_its_commit(gguf):
    e = engine(gguf)
    e.eval(PROMPT)
    e.verify(ROWS)
    with pytest.raises(RuntimeError, match="commit"):
        e.eval([1])
    with pytest.raises(RuntimeError, match="commit"):
        e.verify([1])
    for bad in (0, len(ROWS) + 1):
        with pytest.raises(RuntimeError, match="commit"):
            e.commit(bad)
    e.commit(len(ROWS))
    with pytest.raises(RuntimeError, match="commit"):
        e.commit(1)  # nothing pending any more
    e.eval([1])
    assert e.n_past == len(PROMPT) + len(ROWS) + 1
