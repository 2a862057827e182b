"""Tokenizer metadata (gguf.md, Tokenizer): GLM's byte-level BPE as llama.cpp's `gpt2` model, `glm4` pre."""
from __future__ import annotations

import json
from pathlib import Path

from gguf import TokenType

from .checkpoint import ConversionError
from .hparams import HParams


def write_vocab(w, hf_dir: Path, hp: HParams) -> None:
    """Tokens (padded to vocab_size with unused `[PAD{i}]`), types, merges, special ids, chat template.

    Raises ConversionError when tokenizer.json is missing or holds more tokens than vocab_size.
    """
    path = hf_dir / "tokenizer.json"
    if not path.is_file():
        raise ConversionError(f"{path}: missing (the GGUF carries the tokenizer)")
    tok = json.loads(path.read_text())
    vocab: dict[str, int] = dict(tok["model"]["vocab"])
    added = {a["content"]: a for a in tok.get("added_tokens", [])}
    vocab.update({c: a["id"] for c, a in added.items()})
    if max(vocab.values()) >= hp.vocab_size:
        raise ConversionError(f"{path}: token id {max(vocab.values())} does not fit vocab_size {hp.vocab_size}")

    by_id = {i: t for t, i in vocab.items()}
    tokens, types = [], []
    for i in range(hp.vocab_size):
        t = by_id.get(i)
        if t is None:
            tokens.append(f"[PAD{i}]")
            types.append(TokenType.UNUSED)
        elif t in added:
            tokens.append(t)
            types.append(TokenType.CONTROL if added[t].get("special") else TokenType.USER_DEFINED)
        else:
            tokens.append(t)
            types.append(TokenType.NORMAL)
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"].get("merges", [])]

    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("glm4")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)

    def special(token: str) -> int | None:
        return vocab.get(token)

    for add, token in ((w.add_bos_token_id, "[gMASK]"), (w.add_eot_token_id, "<|user|>"),
                       (w.add_eom_token_id, "<|observation|>"), (w.add_unk_token_id, "<|endoftext|>")):
        if special(token) is not None:
            add(special(token))
    if hp.eos_token_ids:
        w.add_eos_token_id(hp.eos_token_ids[0])
    if hp.pad_token_id is not None:
        w.add_pad_token_id(hp.pad_token_id)
    w.add_add_bos_token(False)  # the chat template writes [gMASK]<sop> itself

    tcfg = hf_dir / "tokenizer_config.json"
    template = json.loads(tcfg.read_text()).get("chat_template") if tcfg.is_file() else None
    jinja = hf_dir / "chat_template.jinja"
    if template is None and jinja.is_file():
        template = jinja.read_text()
    if template:
        w.add_chat_template(template)
