"""Command line of glm5next-server: llama-server's flags and meanings (the model flags are ../model_args.py's,
shared with glm5next-cli)."""
from __future__ import annotations

import argparse
from collections.abc import Sequence

from ..model_args import add_model_args, list_devices_if_asked

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
    p.add_argument("--api-key", metavar="KEY", help="require this key (Authorization: Bearer KEY)")
    p.add_argument("--alias", metavar="NAME", help="model name in /v1/models and responses (default: file name)")
    p.add_argument("--jinja", action=argparse.BooleanOptionalAction, default=True,
                   help="chat template from the file, rendered with jinja2 (on; --no-jinja turns chat off)")
    args = p.parse_args(argv)
    if args.parallel < 1:
        p.error(f"-np/--parallel {args.parallel}: must be >= 1")
    if not 0 <= args.port <= 65535:
        p.error(f"--port {args.port}: must be in [0, 65535]")
    return args
