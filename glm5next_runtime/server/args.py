"""Command line of glm5next-server: llama-server's flags and meanings (the model flags are ../model_args.py's,
shared with glm5next-cli)."""
from __future__ import annotations

import argparse
from collections.abc import Sequence

from ..model_args import add_model_args, list_devices_if_asked
from .body_limit import DEFAULT_MAX_BODY_MIB

PROG = "glm5next-server"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parsed flags; exits 2 with a usage message for bad or not yet supported ones (0 after --list-devices)."""
    list_devices_if_asked(PROG, argv)
    p = argparse.ArgumentParser(prog=PROG, description="OpenAI-compatible server for glm5next GGUF files "
                                "(llama-server flags), with draft-MTP speculative decoding.")
    add_model_args(p)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port to listen on (8080)")
    p.add_argument("-np", "--parallel", type=int, default=1, metavar="N",
                   help="slots: requests served at once, each with its own sequence (1); others wait in a queue")
    p.add_argument("--api-key", metavar="KEY", help="require this key (Authorization: Bearer KEY); Latin-1 text "
                   "(HTTP headers are), not empty, no control characters or surrounding spaces")
    p.add_argument("--alias", metavar="NAME", help="model name in /v1/models and responses (default: file name)")
    p.add_argument("--jinja", action=argparse.BooleanOptionalAction, default=True,
                   help="chat template from the file, rendered with jinja2 (on; --no-jinja turns chat off)")
    p.add_argument("--max-body-mib", type=int, default=DEFAULT_MAX_BODY_MIB, metavar="MIB",
                   help=f"largest request body accepted, in MiB ({DEFAULT_MAX_BODY_MIB}); larger ones get HTTP 413")
    args = p.parse_args(argv)
    if args.parallel < 1:
        p.error(f"-np/--parallel {args.parallel}: must be >= 1")
    if not 0 <= args.port <= 65535:
        p.error(f"--port {args.port}: must be in [0, 65535]")
    if args.max_body_mib < 1:
        p.error(f"--max-body-mib {args.max_body_mib}: must be >= 1")
    if args.api_key is not None and (problem := api_key_problem(args.api_key)):
        p.error(f"--api-key: {problem}")
    return args


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
