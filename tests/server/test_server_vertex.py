"""Vertex AI's prediction protocol (issue 16, llama-server's AIP_MODE=PREDICTION): POST /predict runs each instance
as a request to the endpoint its @requestFormat names and answers each one's JSON; AIP_HTTP_PORT replaces --port,
AIP_HEALTH_ROUTE and AIP_PREDICT_ROUTE move the routes. One server on the tiny file, -np 2, with an API key (the
instances carry the outer request's credentials)."""
from __future__ import annotations

import os
import subprocess

import pytest

from glm5next_runtime.server.vertex.routes import request_format
from live_server import SERVER, Server, free_port, get, post_json

KEY = {"Authorization": "Bearer k"}
CHAT = {"messages": [{"role": "user", "content": "Hi there"}], "max_tokens": 4, "temperature": 0}


@pytest.fixture(scope="module")
def server(plain_gguf, tmp_path_factory):
    port = free_port()
    env = {"AIP_MODE": "PREDICTION", "AIP_HTTP_PORT": str(port), "AIP_PREDICT_ROUTE": "v1/predict",
           "AIP_HEALTH_ROUTE": "/ready"}
    # --port is another one: AIP_HTTP_PORT wins
    server = Server(plain_gguf, tmp_path_factory.mktemp("vertex") / "server.log", "--api-key", "k", "-np", "2",
                    "--port", str(free_port()), port=port, env=env)
    yield server
    server.stop()


def predict(server: Server, body: object) -> tuple[int, dict]:
    return post_json(server, "/v1/predict", body, headers=KEY)


def test_each_instance_answers_what_its_endpoint_answers(server):
    _, chat = post_json(server, "/v1/chat/completions", CHAT, headers=KEY)
    _, tokens = post_json(server, "/tokenize", {"content": "Hello"}, headers=KEY)
    status, out = predict(server, {"instances": [
        {"@requestFormat": "chatCompletions", **CHAT, "stream": True},  # streaming is turned off
        {"@requestFormat": "/tokenize", "content": "Hello"},
        {"@requestFormat": "tokenize", "content": "Hello"},
    ]})
    assert status == 200
    first, *rest = out["predictions"]
    assert first["object"] == "chat.completion" and first["choices"] == chat["choices"]
    assert rest == [tokens, tokens]


def test_an_instance_that_fails_is_an_error_prediction(server):
    status, out = predict(server, {"instances": [{"@requestFormat": "nothingHere"}, 3, {"content": "x"},
                                                 {"@requestFormat": "chatCompletions", "messages": "no"}]})
    assert status == 200
    errors = [p["error"] for p in out["predictions"]]
    assert [e["code"] for e in errors] == [400, 400, 400, 400]
    assert errors[0]["message"] == "no handler registered for @requestFormat: nothingHere"
    assert errors[3]["message"].startswith("messages")


@pytest.mark.parametrize("body, words", [([], "JSON object"), ({"instances": {}}, "instances"),
                                         ({"instances": [{}] * 129}, "maximum size of 128")])
def test_a_body_without_an_instance_list_is_a_400(server, body, words):
    status, out = predict(server, body)
    assert status == 400 and words in out["error"]["message"]


def test_the_key_and_the_routes_of_the_variables_hold(server):
    assert post_json(server, "/v1/predict", {"instances": []})[0] == 401
    assert predict(server, {"instances": []}) == (200, {"predictions": []})
    assert get(server, "/ready", headers=KEY)[0] == 200
    assert post_json(server, "/predict", {"instances": []}, headers=KEY)[0] == 404  # moved by AIP_PREDICT_ROUTE


def test_without_aip_mode_there_is_no_predict_route(plain_gguf, tmp_path):
    server = Server(plain_gguf, tmp_path / "server.log", env={"AIP_HTTP_PORT": "1"})  # ignored without AIP_MODE
    try:
        assert post_json(server, "/predict", {"instances": []})[0] == 404
    finally:
        server.stop()


def test_a_predict_route_on_a_path_of_the_server_exits_1(plain_gguf):
    env = {"AIP_MODE": "PREDICTION", "AIP_PREDICT_ROUTE": "/v1/completions", "AIP_HTTP_PORT": str(free_port())}
    run = subprocess.run([str(SERVER), "-m", str(plain_gguf), "-t", "1", "-c", "256"], env=os.environ | env,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 1 and "AIP_PREDICT_ROUTE /v1/completions: conflicts" in run.stderr


@pytest.mark.parametrize("path, alias", [("/v1/chat/completions", "chatCompletions"), ("/completion", "completion"),
                                         ("/apply-template", "applyTemplate"), ("/v1/messages/count_tokens",
                                                                                "messagesCountTokens"),
                                         ("/slots/{id_slot}", "slots")])
def test_request_formats_are_llama_servers_aliases(path, alias):
    assert request_format(path) == alias
