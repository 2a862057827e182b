"""A 500 never shows internals (issue 14): whatever an unexpected exception says (a heap address, a binding's
signature), the client gets a generic OpenAI-shaped message, and the details go to the log only. In-process (a
Starlette TestClient on the app) because a real server has no way left to fail like this."""
from __future__ import annotations

from pathlib import Path

import pytest
from starlette.testclient import TestClient

from glm5next_runtime import Model
from glm5next_runtime.generate import Decoding
from glm5next_runtime.server.app import create_app
from glm5next_runtime.server.config import ServerConfig
from glm5next_runtime.server.errors import INTERNAL
from glm5next_runtime.server.slots import SlotPool

SECRET = "TypeError: __init__(): incompatible arguments; Invoked with: <glm5next_runtime._core.Engine at 0x7f5e0b74>"


@pytest.fixture(scope="module")
def model(checkpoints) -> Model:
    gguf: Path = checkpoints.convert(checkpoints.make("server-no-nextn", "tiny", dtype="f32", nextn=False),
                                     outtype="f32")
    return Model(gguf, n_ctx=256, n_threads=1)


def explode(*_args, **_kwargs):
    raise RuntimeError(SECRET)


def test_a_500_shows_a_generic_message(model, monkeypatch):
    monkeypatch.setattr(model, "generation", explode)
    app = create_app(SlotPool([model]), ServerConfig(model_name="m"))
    with TestClient(app, raise_server_exceptions=False) as client:
        response = client.post("/v1/completions", json={"prompt": "Hello"})
        assert client.get("/health").json()["slots_idle"] == 1  # the slot came back
    assert response.status_code == 500
    assert response.json() == {"error": {"code": 500, "message": INTERNAL, "type": "server_error"}}
    assert "0x" not in response.text and "_core" not in response.text


class FailingDecoding(Decoding):
    """Shows "first", then fails (in the scheduler's thread, where the generation's tokens become text)."""

    def feed(self, emitted, probs):
        if self.tokens:
            explode()
        self.tokens.extend(emitted)
        yield "first"


def test_a_stream_that_fails_ends_with_a_generic_error_event(model, monkeypatch, caplog):
    real = model.generation

    def failing(ids, **kwargs):
        job = real(ids, **kwargs)
        job.decoding = FailingDecoding(model.tokenizer, model.n_ctx, len(ids), 100, [])
        return job

    monkeypatch.setattr(model, "generation", failing)
    app = create_app(SlotPool([model]), ServerConfig(model_name="m"))
    with TestClient(app, raise_server_exceptions=False) as client:
        response = client.post("/v1/completions", json={"prompt": "Hello", "stream": True})
    assert response.status_code == 200 and "first" in response.text
    assert f'"message": "{INTERNAL}"' in response.text and "0x" not in response.text
    assert SECRET in caplog.text  # the log has it
