"""A chat's next turn resumes its prompt cache whatever the template does to the history (issue 25): templates of
every kind the GLM family ships, written here for the test (GLM's markup, not copied), render the earlier turns
differently from how they were generated, and an agent's conversation (tool calls, tool results, its reasoning
echoed back) goes through the openai client. Turns 2-4 must evaluate at most 25% of their prompt (the context
checkpoints sit where a re-rendered turn parts: before the generation prompt, at the last user message) and answer
as with cache_prompt false. The failure message of each claim carries the per-turn cache figures."""
from __future__ import annotations

import pytest

from live_server import Server

# what an assistant message renders as after "<|assistant|>", for each kind; `keep`: it comes after the last user
# message (GLM-4.5 to 5 keep the reasoning of those only)
HISTORY = {
    "reasoning kept": "\n<think>{{ m.reasoning_content or '' }}</think>\n{{ m.content or '' }}",
    "reasoning after the last user message":
        "\n<think>{{ (m.reasoning_content or '') if loop.index0 > ns.last_user else '' }}</think>\n{{ m.content or '' }}",
    "reasoning stripped": "\n{{ m.content or '' }}",
    "empty think blocks": "\n<think></think>\n{{ m.content or '' }}",
    "close tag only": "</think>{{ m.content or '' }}",
}
# the generation prompt after "<|assistant|>"
GENERATION = {
    "reasoning kept": "\n<think>",
    "reasoning after the last user message": "\n<think>",
    "reasoning stripped": "\n<think>",
    "empty think blocks": "\n<think></think>\n",  # a model that does not think: the answer continues the prompt
    "close tag only": "<think>",
}
TEMPLATE = (
    "[gMASK]<sop>"
    "{%- set ns = namespace(last_user=-1) -%}"
    "{%- for m in messages -%}{%- if m.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if tools -%}<|system|>\n# Tools\n{%- for t in tools -%}\n{{ t.function | tojson }}{%- endfor -%}{%- endif -%}"
    "{%- for m in messages -%}"
    "{%- if m.role == 'assistant' -%}<|assistant|>HISTORY"
    "{%- for c in m.tool_calls or [] -%}<tool_call>{{ c.function.name }}"
    "{%- for k, v in c.function.arguments.items() -%}<arg_key>{{ k }}</arg_key><arg_value>{{ v }}</arg_value>"
    "{%- endfor -%}</tool_call>{%- endfor -%}"
    "{%- elif m.role == 'tool' -%}<|observation|><tool_response>{{ m.content }}</tool_response>"
    "{%- else -%}<|{{ m.role }}|>\n{{ m.content }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|assistant|>GENERATION{%- endif -%}")
SYSTEM = "You are a travel agent. You look the weather up before you answer, in one sentence. " * 40  # ~1,200 tokens
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city today.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
N = 12


@pytest.fixture(scope="module", params=list(HISTORY))
def server(request, predictable_gguf, tmp_path_factory):
    kind = request.param
    folder = tmp_path_factory.mktemp("turns")
    template = folder / "template.jinja"
    template.write_text(TEMPLATE.replace("HISTORY", HISTORY[kind]).replace("GENERATION", GENERATION[kind]))
    s = Server(predictable_gguf, folder / "server.log", "--jinja", "--chat-template-file", str(template))
    s.kind = kind
    yield s
    s.stop()


def said(reply) -> dict:
    """The assistant message as an agent sends it back: its content and its reasoning (echoed, as opencode does)."""
    message = reply.choices[0].message
    return {"role": "assistant", "content": message.content or "",
            "reasoning_content": getattr(message, "reasoning_content", None) or ""}


def call(i: int, city: str) -> dict:
    return {"id": f"call_{i}", "type": "function", "function": {"name": "get_weather",
                                                                "arguments": f'{{"city": "{city}"}}'}}


def test_an_agent_loop_resumes_every_turn_whatever_the_template_renders(server):
    """The user asks; two turns answer tool results (the assistant's calls written by the client, its reasoning
    echoed); then the user asks again (GLM's templates then drop the reasoning of the earlier answers)."""
    client = server.client()
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Weather in Paris?"}]
    figures = []
    for turn in range(4):
        reply = client.chat.completions.create(model="m", messages=messages, tools=TOOLS, max_tokens=N,
                                               temperature=0)
        usage = reply.usage
        figures.append((turn + 1, usage.prompt_tokens, usage.prompt_tokens_details.cached_tokens))
        again = client.chat.completions.create(model="m", messages=messages, tools=TOOLS, max_tokens=N,
                                               temperature=0, extra_body={"cache_prompt": False})
        assert again.choices[0].message == reply.choices[0].message, (server.kind, turn + 1)
        if turn < 2:
            messages += [said(reply) | {"tool_calls": [call(turn, ["Paris", "Lyon"][turn])]},
                         {"role": "tool", "tool_call_id": f"call_{turn}", "content": "sunny, 21 C"}]
        else:
            messages += [said(reply), {"role": "user", "content": "Thanks. And in Rome?"}]
    print(f"{server.kind}: (turn, prompt tokens, cached)", figures)  # the report (pytest -s)
    assert figures[0][1] > 1000, figures
    for turn, prompt, cached in figures[1:]:
        assert prompt - cached <= 0.25 * prompt, (server.kind, "turn, prompt tokens, cached:", figures)
