"""Chat helpers (glm5next_runtime/chat.py): the template rendering of the generated checkpoints' template, think
block detection, and the streaming reasoning/content split however the pieces cut "</think>"."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from glm5next_runtime.chat import (ChatTemplate, ChatTemplateError, ReasoningSplitter, opens_think_block,
                                   split_reasoning)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from make_checkpoint import CHAT_TEMPLATE  # noqa: E402

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]


def test_render_adds_the_generation_prompt():
    t = ChatTemplate(CHAT_TEMPLATE)
    assert t.render(MESSAGES) == "[gMASK]<sop><|system|>\nBe brief.<|user|>\nHi<|assistant|>\n<think>"
    no_think = t.render(MESSAGES, {"enable_thinking": False})
    assert no_think.endswith("<|assistant|>\n<think></think>\n")
    assert opens_think_block(t.render(MESSAGES)) and not opens_think_block(no_think)


def test_history_reasoning_and_template_variables():
    t = ChatTemplate(CHAT_TEMPLATE)
    history = [*MESSAGES, {"role": "assistant", "reasoning_content": "hm", "content": "Hello"},
               {"role": "user", "content": "Again"}]
    assert "<|assistant|>\n<think>hm</think>\nHello<|user|>\nAgain" in t.render(history)
    # a template variable named like the reserved ones cannot replace them
    assert t.render(MESSAGES, {"messages": [], "add_generation_prompt": False}) == t.render(MESSAGES)


def test_template_errors():
    with pytest.raises(ChatTemplateError, match="does not parse"):
        ChatTemplate("{% for %}")
    t = ChatTemplate("{{ raise_exception('only user turns') }}")
    with pytest.raises(ChatTemplateError, match="only user turns"):
        t.render(MESSAGES)
    with pytest.raises(ChatTemplateError):
        ChatTemplate("{{ messages.__class__.__mro__ }}{{ ''.__class__.__subclasses__() }}").render(MESSAGES)


@pytest.mark.parametrize("text, reasoning, content", [
    ("plan it</think>\n\nthe answer", "plan it", "the answer"),
    ("no end tag", "no end tag", ""),
    ("</think>only content", "", "only content"),
    ("a </thin b", "a </thin b", ""),
    ("x</think>y</think>z", "x", "y</think>z"),
])
def test_split_at_every_cut(text, reasoning, content):
    assert split_reasoning(text) == (reasoning, content)
    for cut in range(len(text) + 1):  # every way of cutting the text into two pieces, then one char at a time
        for pieces in ([text[:cut], text[cut:]], list(text)):
            splitter = ReasoningSplitter()
            out = [splitter.feed(p) for p in pieces] + [splitter.flush()]
            assert ("".join(r for r, _ in out), "".join(c for _, c in out)) == (reasoning, content)
            # no reasoning after the first content (one feed may return both: its reasoning comes first)
            first_content = next((i for i, (_, c) in enumerate(out) if c), len(out))
            assert not any(r for r, _ in out[first_content + 1:])
