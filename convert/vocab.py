"""Tokenizer metadata (docs/gguf.md, Tokenizer): GLM's byte-level BPE as llama.cpp's `gpt2` model, `glm4` pre."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gguf import TokenType

from .errors import ConversionError
from .fields import REQUIRED, Fields, json_type, show
from .hparams import HParams
from .inputs import read_json, regular_file

TOKENIZER = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
CHAT_TEMPLATE = "chat_template.jinja"
# (writer method, token) for the special ids taken from the vocab
SPECIALS = (("add_bos_token_id", "[gMASK]"), ("add_eot_token_id", "<|user|>"),
            ("add_eom_token_id", "<|observation|>"), ("add_unk_token_id", "<|endoftext|>"))


@dataclass
class Vocab:
    """The tokenizer as read and checked from the checkpoint; `write` adds it to a GGUFWriter (any number of
    times: the loader-rules check writes the same metadata as the output)."""
    files: list[Path]               # the files read (inputs the output must not overwrite)
    vocab: dict[str, int]           # token -> id, added tokens included
    added: dict[str, bool]          # added token content -> special (a control token)
    merges: list[str]
    eos_token_ids: list[int]
    pad_token_id: int | None
    vocab_size: int
    template: str | list | None     # chat template (a string, or a list of named templates)

    def write(self, w) -> None:
        """Tokens (padded to vocab_size with unused `[PAD{i}]`), types, merges, special ids, chat template."""
        by_id = {i: t for t, i in self.vocab.items()}
        tokens, types = [], []
        for i in range(self.vocab_size):
            t = by_id.get(i)
            if t is None:
                tokens.append(f"[PAD{i}]")
                types.append(TokenType.UNUSED)
            elif t in self.added:
                tokens.append(t)
                types.append(TokenType.CONTROL if self.added[t] else TokenType.USER_DEFINED)
            else:
                tokens.append(t)
                types.append(TokenType.NORMAL)
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("glm4")
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(self.merges)
        for method, token in SPECIALS:
            if token in self.vocab:
                getattr(w, method)(self.vocab[token])
        if self.eos_token_ids:
            w.add_eos_token_id(self.eos_token_ids[0])
        if self.pad_token_id is not None:
            w.add_pad_token_id(self.pad_token_id)
        w.add_add_bos_token(False)  # the chat template writes [gMASK]<sop> itself
        if self.template:
            w.add_chat_template(self.template)


def read_vocab(hf_dir: Path, hp: HParams) -> Vocab:
    """Read and check tokenizer.json (+ tokenizer_config.json / chat_template.jinja for the chat template).

    Raises ConversionError naming the file and field when tokenizer.json is missing, not a regular file, not
    the expected structure, or holds a token id that does not fit vocab_size; when config.json's eos/pad ids do
    not fit vocab_size; or when the chat template is not a string (or a list of {name, template} strings).
    """
    path = regular_file(hf_dir / TOKENIZER, True, "the GGUF carries the tokenizer")
    files = [path]
    tok = Fields(str(path), [read_json(path)])
    model = tok.object("model")
    vocab_obj = model.object("vocab").sections[0]
    if not vocab_obj:
        raise ConversionError(f"{path}: field model.vocab: expected a non-empty object of token -> id")
    vocab_fields = Fields(str(path), [vocab_obj], ["model.vocab."])
    vocab = {t: vocab_fields.integer(t) for t in vocab_obj}
    added: dict[str, bool] = {}
    for i, entry in enumerate(tok.array("added_tokens", [])):
        a = Fields(str(path), [entry], [f"added_tokens[{i}]."])
        content = a.string("content", REQUIRED)
        added[content] = a.boolean("special", False)
        vocab[content] = a.integer("id", REQUIRED)
    merges = []
    for i, m in enumerate(model.array("merges", [])):
        if isinstance(m, str):
            merges.append(m)
        elif isinstance(m, list) and len(m) == 2 and all(isinstance(x, str) for x in m):
            merges.append(" ".join(m))
        else:
            raise ConversionError(f"{path}: field model.merges[{i}]: expected \"a b\" or [\"a\", \"b\"], "
                                  f"got {show(m)} ({json_type(m)})")
    top = max(vocab.values())
    if top >= hp.vocab_size:
        raise ConversionError(f"{path}: token id {top} does not fit vocab_size {hp.vocab_size}")
    for field, ids in (("eos_token_id", hp.eos_token_ids), ("pad_token_id", [hp.pad_token_id])):
        for i in ids:
            if i is not None and i >= hp.vocab_size:
                raise ConversionError(f"config.json: field {field}: token id {i} does not fit vocab_size "
                                      f"{hp.vocab_size}")

    template = None
    tcfg = regular_file(hf_dir / TOKENIZER_CONFIG, required=False)
    if tcfg is not None:
        files.append(tcfg)
        template = _template(Fields(str(tcfg), [read_json(tcfg)]))
    jinja = regular_file(hf_dir / CHAT_TEMPLATE, required=False)
    if jinja is not None:
        files.append(jinja)
        if template is None:
            try:
                template = jinja.read_bytes().decode("utf-8")
            except (OSError, UnicodeDecodeError) as e:
                raise ConversionError(f"{jinja}: cannot read it as UTF-8 text ({e})") from e
    return Vocab(files, vocab, added, merges, hp.eos_token_ids, hp.pad_token_id, hp.vocab_size, template)


def _template(cfg: Fields) -> str | list | None:
    """tokenizer_config.json's chat_template: a string, a list of {"name", "template"} strings, or None."""
    found = cfg.find("chat_template")
    if found is None or found[0] is None or isinstance(found[0], str):
        return None if found is None else found[0]
    if isinstance(found[0], list):
        for i, entry in enumerate(found[0]):
            named = Fields(cfg.file, [entry], [f"chat_template[{i}]."])
            named.string("name", REQUIRED)
            named.string("template", REQUIRED)
        return found[0]
    raise cfg.fail("chat_template", f"expected a string or a list of named templates, got {json_type(found[0])}")
