"""Command line of glm5next-server: llama-server's flags and meanings (the model flags are ../model_args.py's,
shared with glm5next-cli)."""
from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from typing import Any

from ..model_args import add_model_args, list_devices_if_asked, split_list
from .body_limit import DEFAULT_MAX_BODY_MIB
from .builtin_templates import BUILTIN, DEFAULT, looks_like_jinja
from .cors import CORSPolicy
from .prompt_cache import DEFAULT_CACHE_RAM_MIB
from .request_defaults import NO_LIMIT, RequestDefaults
from .schemas import INT32_MAX

PROG = "glm5next-server"
# llama-server's penalty flags and the value that turns each off, the only one this sampler takes
PENALTIES = {"--repeat-penalty": 1.0, "--presence-penalty": 0.0, "--frequency-penalty": 0.0}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parsed flags, grouped in --help as llama-server groups them; exits 2 with a usage message naming the flag for
    a bad value or one this server cannot honour (0 after --list-devices)."""
    list_devices_if_asked(PROG, argv)
    p = argparse.ArgumentParser(prog=PROG, description="OpenAI-compatible server for glm5next GGUF files "
                                "(llama-server flags), with draft-MTP speculative decoding.")
    common = p.add_argument_group("common params")
    add_model_args(common)
    common.add_argument("-n", "--predict", "--n-predict", dest="n_predict", type=int, default=NO_LIMIT, metavar="N",
                        help="tokens to predict: what a request without a limit gets (its own limit wins; -1: no "
                        "limit)")
    common.add_argument("-ub", "--ubatch-size", type=int, default=512, metavar="N",
                        help="physical batch: a forward pass takes at most this many prompt tokens, and at most -b "
                        "(512)")
    common.add_argument("-fa", "--flash-attn", choices=("on", "off", "auto"), nargs="?", const="on", default="auto",
                        help="accepted for llama-server's command lines; no effect: the engine's attention is its own "
                        "(auto)")
    common.add_argument("-v", "--verbose", "--log-verbose", action="store_true",
                        help="log at debug level, and every response that is not streamed carries __verbose (a "
                             "request's verbose field wins), as llama-server's")

    sampling = p.add_argument_group("sampling params", "server-wide defaults: a request's own field wins")
    d = RequestDefaults()
    sampling.add_argument("--temp", "--temperature", dest="temperature", type=float, default=d.temperature,
                          metavar="N", help=f"temperature ({d.temperature}; <= 0: greedy)")
    sampling.add_argument("--top-k", type=int, default=d.top_k, metavar="N", help=f"top-k ({d.top_k}, 0 = disabled)")
    sampling.add_argument("--top-p", type=float, default=d.top_p, metavar="N",
                          help=f"top-p ({d.top_p}, 1.0 = disabled)")
    sampling.add_argument("--min-p", type=float, default=d.min_p, metavar="N",
                          help=f"min-p ({d.min_p}, 0.0 = disabled)")
    sampling.add_argument("--repeat-last-n", type=int, default=64, metavar="N",
                          help="tokens the penalties look back on (64); no effect: the sampler has no penalties")
    for flag, neutral in PENALTIES.items():
        sampling.add_argument(flag, type=float, default=neutral, metavar="N",
                              help=f"{neutral} only: the sampler has no penalties")

    sampling.add_argument("--reasoning-format", choices=("auto", "deepseek", "none"), metavar="FORMAT",
                          help="where a chat's reasoning goes: auto / deepseek (reasoning_content, the default) or "
                          "none (left in content)")
    sampling.add_argument("--reasoning-budget", type=int, default=-1, metavar="N",
                          help="thinking allowed: -1 (as the template and the request say, the default) or 0 (off "
                          "unless a request turns it on)")

    server = p.add_argument_group("server-specific params")
    server.add_argument("--host", default="127.0.0.1", type=split_list, metavar="HOST[,HOST...]",
                        help="addresses to listen on, comma-separated (127.0.0.1)")
    server.add_argument("--port", type=int, default=8080, help="port to listen on (8080)")
    server.add_argument("-np", "--parallel", type=int, default=1, metavar="N",
                        help="slots: requests served at once, each with its own sequence (1); others wait in a queue")
    server.add_argument("-kvu", "--kv-unified", "-no-kvu", "--no-kv-unified", action=NegatableFlag, default=False,
                        help="every slot gets the whole -c instead of -c divided among the -np slots; each slot owns "
                        "its caches, so this costs -np times the cache memory (off)")
    server.add_argument("--context-shift", "--no-context-shift", action=NegatableFlag, default=False,
                        help="off only: the KDA layers' recurrent state cannot drop the oldest tokens, so a generation "
                        "stops at the end of the context (llama-server's default)")
    server.add_argument("-a", "--alias", type=split_list, default=[], metavar="NAME[,NAME...]",
                        help="model names, comma-separated: /v1/models lists the first in sort order as the id, and "
                        "all as its aliases (default: the file name)")
    server.add_argument("--tags", type=split_list, default=[], metavar="TAG[,TAG...]",
                        help="model tags, comma-separated (listed in /v1/models)")
    cors = CORSPolicy()
    server.add_argument("--cors-origins", default=cors.origins, metavar="ORIGINS",
                        help="Access-Control-Allow-Origin: * reflects the request's Origin (with --cors-credentials; "
                        "else *), localhost reflects only a localhost one, anything else is sent as given (*)")
    server.add_argument("--cors-methods", default=cors.methods, metavar="METHODS",
                        help=f"methods a CORS preflight allows ({cors.methods})")
    server.add_argument("--cors-headers", default=cors.headers, metavar="HEADERS",
                        help=f"headers a CORS preflight allows ({cors.headers})")
    server.add_argument("--cors-credentials", "--no-cors-credentials", action=NegatableFlag, default=cors.credentials,
                        help="whether CORS allows credentials (on)")
    server.add_argument("--api-key", metavar="KEY", help="require this key (Authorization: Bearer KEY); Latin-1 text "
                        "(HTTP headers are), not empty, no control characters or surrounding spaces")
    server.add_argument("--jinja", action=argparse.BooleanOptionalAction, default=True,
                        help="chat template from the file (or the flags below), rendered with jinja2 (on; --no-jinja: "
                        f"a built-in template, {DEFAULT} unless --chat-template names another)")
    server.add_argument("--chat-template", metavar="NAME_OR_JINJA",
                        help=f"a built-in template ({', '.join(BUILTIN)}) or, with --jinja, a Jinja template "
                        "(default: the file's)")
    server.add_argument("--chat-template-file", metavar="FILE", help="a Jinja chat template file (needs --jinja)")
    server.add_argument("-sp", "--special", action="store_true",
                        help="show generated control tokens ([MASK], <|user|>, ...) in the text (off: they render as "
                        "nothing)")
    server.add_argument("--metrics", action="store_true", help="serve GET /metrics (Prometheus; off: 501)")
    server.add_argument("--props", action="store_true", help="accept POST /props (off: 501)")
    server.add_argument("--slots", "--no-slots", action=NegatableFlag, default=True,
                        help="serve GET /slots (on)")
    server.add_argument("--max-body-mib", type=int, default=DEFAULT_MAX_BODY_MIB, metavar="MIB",
                        help=f"largest request body accepted, in MiB ({DEFAULT_MAX_BODY_MIB}); larger ones get HTTP "
                        "413")
    server.add_argument("--cache-ram", type=int, default=DEFAULT_CACHE_RAM_MIB, metavar="MIB",
                        help=f"RAM prompt cache shared by the slots: sequences a request overwrites are kept in host "
                        f"memory, and a later prompt sharing more with one of them than with its slot resumes from "
                        f"it, least recently used dropped first ({DEFAULT_CACHE_RAM_MIB} MiB; -1: no limit, 0: off)")
    server.add_argument("--sleep-idle-seconds", type=int, default=-1, metavar="SECONDS",
                        help="after this many seconds without a request, free the model (weights and slots) and load "
                        "it again for the next request (-1: never, the default)")
    server.add_argument("--slot-save-path", metavar="DIR", help="directory for POST /slots/{id}?action=save|restore "
                        "(created if missing; without it the slot actions answer 501)")
    args = p.parse_args(argv)
    for problem in problems(args):
        p.error(problem)
    return args


def problems(args: argparse.Namespace) -> list[str]:
    """What is wrong with parsed flags, each message naming its flag (the first is reported)."""
    out = []
    if args.reasoning_budget not in (-1, 0):
        out.append(f"--reasoning-budget {args.reasoning_budget}: -1 (unrestricted) or 0 (thinking off), as "
                   "llama-server takes it")
    if args.cache_ram < -1:
        out.append(f"--cache-ram {args.cache_ram}: must be >= -1 (-1: no limit, 0: off)")
    if args.sleep_idle_seconds == 0 or args.sleep_idle_seconds < -1:
        out.append(f"--sleep-idle-seconds {args.sleep_idle_seconds}: cannot be 0 or less than -1 (-1: never)")
    if args.parallel < 1:
        out.append(f"-np/--parallel {args.parallel}: must be >= 1")
    elif args.ctx_size >= 1 and slot_ctx(args) < 1:
        out.append(f"-c {args.ctx_size} -np {args.parallel}: each slot would get no context (llama-server divides "
                   "-c among the slots); raise -c, or give every slot all of it with --kv-unified")
    if not 0 <= args.port <= 65535:
        out.append(f"--port {args.port}: must be in [0, 65535]")
    if not args.host:
        out.append("--host: no address given")
    if args.max_body_mib < 1:
        out.append(f"--max-body-mib {args.max_body_mib}: must be >= 1")
    if args.api_key is not None and (problem := api_key_problem(args.api_key)):
        out.append(f"--api-key: {problem}")
    if args.n_predict < NO_LIMIT:
        out.append(f"-n/--n-predict {args.n_predict}: must be >= -1 (-1: no limit)")
    if args.ubatch_size < 1:
        out.append(f"-ub/--ubatch-size {args.ubatch_size}: must be >= 1")
    if math.isnan(args.temperature):
        out.append("--temp nan: must be a number")
    if not 0 <= args.top_k <= INT32_MAX:
        out.append(f"--top-k {args.top_k}: must be in [0, {INT32_MAX}]")
    if not 0 < args.top_p <= 1:
        out.append(f"--top-p {args.top_p}: must be in (0, 1]")
    if not 0 <= args.min_p <= 1:
        out.append(f"--min-p {args.min_p}: must be in [0, 1]")
    if args.repeat_last_n < -1:
        out.append(f"--repeat-last-n {args.repeat_last_n}: must be >= -1")
    for flag, neutral in PENALTIES.items():
        if getattr(args, flag[2:].replace("-", "_")) != neutral:
            out.append(f"{flag} {getattr(args, flag[2:].replace('-', '_'))}: not supported: the sampler has no "
                       f"penalties ({neutral}, off, is the only value)")
    if args.context_shift:
        out.append("--context-shift: not supported: the KDA layers' recurrent state cannot drop the oldest tokens "
                   "(a shift would mean evaluating the kept ones again); a generation stops at the end of the "
                   "context, as with llama-server's default --no-context-shift")
    out += template_problems(args)
    return out


def template_problems(args: argparse.Namespace) -> list[str]:
    """--chat-template, --chat-template-file and --jinja that do not go together."""
    name = args.chat_template
    if name is not None and args.chat_template_file is not None:
        return ["--chat-template and --chat-template-file: give one of them"]
    if name is not None and name not in BUILTIN and not (args.jinja and looks_like_jinja(name)):
        kind = "" if args.jinja else " (--no-jinja takes a built-in name only)"
        return [f"--chat-template {name!r}: not a built-in template ({', '.join(BUILTIN)}) nor a Jinja template{kind}"]
    if args.chat_template_file is not None and not args.jinja:
        return ["--chat-template-file: needs --jinja (--no-jinja takes a built-in --chat-template only)"]
    return []


def slot_ctx(args: argparse.Namespace) -> int:
    """The context of each slot: -c divided among the -np slots, as llama-server divides it, or all of -c for every
    slot with --kv-unified."""
    return args.ctx_size if args.kv_unified else args.ctx_size // args.parallel


class NegatableFlag(argparse.Action):
    """A flag spelled on (--slots, -kvu) or off (--no-slots, -no-kvu), as llama-server pairs them."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any):
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        setattr(namespace, self.dest, not (option_string or "").lstrip("-").startswith("no-"))


def api_key_problem(key: str) -> str | None:
    """Why no client could ever send `key` in an HTTP header (so it would lock everyone out, or, empty, turn
    authentication off), or None for a usable key."""
    if not key:
        return "the key is empty (leave the flag out to serve without authentication)"
    try:
        key.encode("latin-1")
    except UnicodeEncodeError:
        return "the key has characters outside Latin-1, which HTTP headers cannot carry"
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in key):
        return "the key has control characters, which HTTP headers cannot carry"
    if key != key.strip(" \t"):
        return "the key starts or ends with a space, which HTTP drops from header values"
    return None
