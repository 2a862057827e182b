"""glm5next-server: load the -np slot models, then serve the OpenAI-compatible API (app.py) with uvicorn.

    glm5next-server -m FILE [--host 127.0.0.1] [--port 8080] [-np 1] [-c 4096] [--spec-type draft-mtp] ...

Everything that can fail at start-up (flags, the file, --override-kv, placement, a chat template that does not
parse) fails before the port is bound: exit 2 for a usage error (an --api-key no client could send included), 1 for
a model that does not load.
"""
from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

import uvicorn

from .app import ServerConfig, create_app
from ..model import Model
from ..model_args import describe_model, model_kwargs, request_seed
from ..prompt import max_text_bytes
from .args import PROG, parse_args
from .slots import SlotPool
from .stopping import GRACE_S
from .templates import TemplateLimits, TemplateWorkers

log = logging.getLogger("glm5next.server")
MAX_TEMPLATE_WORKERS = 4  # renders take milliseconds: more slots need no more workers


def load_slots(args: argparse.Namespace) -> list[Model]:
    """One sequence per slot on one loaded model (Model.another_sequence): the weights, memory-mapped or placed on a
    device, are loaded once; each slot has its own caches and compute buffers.
    Raises ValueError when the file, an override or a placement rule is bad."""
    models = [Model(**model_kwargs(args))]
    log.info("slot 0 loaded")
    for i in range(1, args.parallel):
        models.append(models[0].another_sequence())
        log.info("slot %d loaded", i)
    return models


def chat_template(model: Model, enabled: bool, workers: int = 1) -> TemplateWorkers | None:
    """The file's chat template in `workers` worker processes (templates.py), or None (chat off) without one or with
    --no-jinja. Rendered text longer than the context could hold is refused by the workers. Raises
    ChatTemplateError when the template does not parse or its workers do not start."""
    if not enabled or model.chat_template is None:
        return None
    special = model.tokenizer.special_ids
    text = {name: model.detokenize([special[name]]) if name in special else "" for name in ("bos", "eos")}
    limits = TemplateLimits(max_chars=max_text_bytes(model.n_ctx, model.tokenizer.max_token_bytes, room=1))
    return TemplateWorkers(model.chat_template, bos_token=text["bos"], eos_token=text["eos"], workers=workers,
                           limits=limits)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s:     %(message)s")  # uvicorn's look
    try:
        models = load_slots(args)
        template = chat_template(models[0], args.jinja, workers=min(args.parallel, MAX_TEMPLATE_WORKERS))
    except (ValueError, OSError) as e:  # ModelError and ChatTemplateError are ValueErrors
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    try:
        serve(args, models, template)
    finally:
        if template is not None:
            template.close()
    return 0


def serve(args: argparse.Namespace, models: list[Model], template: TemplateWorkers | None) -> None:
    """Serve the slot models with uvicorn until a signal stops the server."""
    for line in describe_model(models[0], args):
        log.info("%s", line)
    if template is None:
        log.warning("chat is off (%s): /v1/chat/completions answers 501",
                    "--no-jinja" if not args.jinja else "the file has no chat template")
    name = Path(args.model).name
    config = ServerConfig(model_name=args.alias or name, model_names=frozenset({args.alias or name, name}),
                          chat_template=template, default_seed=request_seed(args), api_key=args.api_key,
                          max_body_bytes=args.max_body_mib << 20)
    app = create_app(SlotPool(models), config)
    log.info("%d slot(s), n_ctx %d each; requests up to %d MiB; listening on http://%s:%d", args.parallel,
             models[0].n_ctx, args.max_body_mib, args.host, args.port)
    # uvicorn exits non-zero by itself when the port cannot be bound; its graceful timeout outlasts the grace
    # running generations get (stopping.py), so it has nothing left to cancel
    uvicorn.run(app, host=args.host, port=args.port, log_level="info", timeout_graceful_shutdown=GRACE_S + 5)


if __name__ == "__main__":
    raise SystemExit(main())
