"""The chat templates built into the server, under llama-server's names: chat renders with one when the model file
has none, with --no-jinja, or with --chat-template NAME. llama-server implements its built-ins in C++
(llama_chat_apply_template); here they are Jinja sources, rendered like any other template (templates.py).

chatglm4 is GLM's format, [gMASK]<sop><|role|>\\ncontent... (llama.cpp's chatglm4, which it also picks for the
GLM-4.5 family's files), and the default: every glm5next file speaks it. chatml is llama-server's general default.
"""
from __future__ import annotations

CHATGLM4 = ("[gMASK]<sop>"
            "{%- for m in messages -%}{{ '<|' + m.role + '|>\n' + (m.content or '') }}{%- endfor -%}"
            "{%- if add_generation_prompt -%}{{ '<|assistant|>\n' }}{%- endif -%}")
CHATML = ("{%- for m in messages -%}{{ '<|im_start|>' + m.role + '\n' + (m.content or '') + '<|im_end|>\n' }}"
          "{%- endfor -%}"
          "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}{%- endif -%}")
BUILTIN = {"chatglm4": CHATGLM4, "chatml": CHATML}
DEFAULT = "chatglm4"


def looks_like_jinja(text: str) -> bool:
    """Whether --chat-template's value is a template's source rather than a name."""
    return "{{" in text or "{%" in text


def template_source(file_template: str | None, jinja: bool, flag: str | None,
                    file_text: str | None) -> tuple[str, str]:
    """The chat template the server renders with, and where it comes from (for the log): --chat-template-file's
    text, else --chat-template (a built-in name, or with --jinja a Jinja source), else with --jinja the model
    file's own template, else the DEFAULT built-in. The flags were checked together by args.py."""
    if file_text is not None:
        return file_text, "--chat-template-file"
    if flag is not None:
        return (BUILTIN[flag], f"built-in {flag}") if flag in BUILTIN else (flag, "--chat-template")
    if jinja and file_template is not None:
        return file_template, "the model file's"
    return BUILTIN[DEFAULT], f"built-in {DEFAULT} ({'the model file has none' if jinja else '--no-jinja'})"
