"""glm5next-server: load the -np slot models, then serve the OpenAI-compatible API (app.py) with uvicorn.

    glm5next-server -m FILE [--host 127.0.0.1] [--port 8080] [-np 1] [-c 4096] [--spec-type draft-mtp] ...

Everything that can fail at start-up (flags, the file, --override-kv, placement, a chat template that does not
parse or cannot be read) fails before the port is bound: exit 2 for a usage error (an --api-key no client could send
included), 1 for a model, template or address that does not work. With several --host addresses each gets its own
socket (llama-server's list); uvicorn binds a single one itself.
"""
from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path

import uvicorn

from .app import create_app
from .config import ServerConfig
from ..model import Model
from ..model_args import describe_model, model_kwargs, request_seed
from ..prompt import max_text_bytes
from .args import PROG, parse_args, slot_ctx
from .builtin_templates import template_source
from .cors import CORSPolicy
from .prompt_cache import PromptCache
from .request_defaults import RequestDefaults
from .slots import SlotPool
from .stopping import GRACE_S
from .templates import TemplateLimits, TemplateWorkers
from .vertex import VertexSettings

log = logging.getLogger("glm5next.server")
MAX_TEMPLATE_WORKERS = 4  # renders take milliseconds: more slots need no more workers


def load_slots(args: argparse.Namespace) -> list[Model]:
    """One sequence per slot on one engine (Model.another_sequence): the weights, memory-mapped or placed on a device,
    the compute buffers and the thread pool once; each slot its own caches, for its share of -c (slot_ctx). The slots'
    generations run batched (../scheduler.py), a prompt ubatch of at most -b and -ub tokens per step.
    Raises ValueError when the file, an override or a placement rule is bad."""
    kwargs = model_kwargs(args) | dict(n_ctx=slot_ctx(args), n_batch=min(args.batch_size, args.ubatch_size),
                                       n_seq_max=args.parallel)
    models = [Model(**kwargs)]
    log.info("slot 0 loaded")
    for i in range(1, args.parallel):
        models.append(models[0].another_sequence())
        log.info("slot %d loaded", i)
    return models


def chat_template(model: Model, args: argparse.Namespace, workers: int = 1) -> TemplateWorkers:
    """The chat template (builtin_templates.template_source: the flags', the file's, or a built-in) in `workers`
    worker processes (templates.py). Rendered text longer than the context could hold is refused by the workers.
    Raises ChatTemplateError when the template does not parse or its workers do not start, OSError or ValueError
    naming --chat-template-file when that file cannot be read."""
    file_text = None
    if args.chat_template_file is not None:
        try:
            file_text = Path(args.chat_template_file).read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"--chat-template-file {args.chat_template_file}: not UTF-8 text") from None
    source, origin = template_source(model.chat_template, args.jinja, args.chat_template, file_text)
    log.info("chat template: %s", origin)
    special = model.tokenizer.special_ids
    text = {name: model.detokenize([special[name]]) if name in special else "" for name in ("bos", "eos")}
    limits = TemplateLimits(max_chars=max_text_bytes(model.n_ctx, model.tokenizer.max_token_bytes, room=1))
    return TemplateWorkers(source, bos_token=text["bos"], eos_token=text["eos"], workers=workers, limits=limits)


def prompt_cache(cache_ram_mib: int) -> PromptCache | None:
    """--cache-ram: None when 0 (off), no limit when -1."""
    if cache_ram_mib == 0:
        return None
    return PromptCache(None if cache_ram_mib < 0 else cache_ram_mib << 20)


def slot_save_dir(path: str | None) -> Path | None:
    """--slot-save-path as an existing directory (created with its parents). Raises OSError when it cannot be."""
    if path is None:
        return None
    Path(path).mkdir(parents=True, exist_ok=True)
    return Path(path)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(levelname)s:     %(message)s")  # uvicorn's look
    try:
        vertex = VertexSettings.from_env(os.environ)  # Vertex AI's container variables (vertex/)
        if vertex is not None and vertex.port != args.port:
            log.warning("AIP_HTTP_PORT %d replaces --port %d (Vertex AI's AIP_MODE=PREDICTION)", vertex.port,
                        args.port)
            args.port = vertex.port
        slot_save_dir(args.slot_save_path)  # before loading: a directory that cannot be made fails at once
        models = load_slots(args)
        template = chat_template(models[0], args, workers=min(args.parallel, MAX_TEMPLATE_WORKERS))
    except (ValueError, OSError) as e:  # ModelError and ChatTemplateError are ValueErrors
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    try:
        serve(args, models, template, vertex)
    except (OSError, ValueError) as e:  # an address of several --host ones that cannot be bound, AIP_PREDICT_ROUTE
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    finally:
        template.close()
    return 0


def serve(args: argparse.Namespace, models: list[Model], template: TemplateWorkers,
          vertex: VertexSettings | None = None) -> None:
    """Serve the slot models with uvicorn until a signal stops the server (with Vertex AI's routes when `vertex`).
    Raises OSError naming an address of several --host ones that cannot be bound, ValueError naming an
    AIP_PREDICT_ROUTE that is a path of this server."""
    for line in describe_model(models[0], args):
        log.info("%s", line)
    names = sorted(args.alias) or [Path(args.model).name]  # llama-server keeps its aliases in a sorted set
    config = ServerConfig(model_name=names[0], aliases=tuple(names) if args.alias else (), tags=tuple(args.tags),
                          chat_template=template, special=args.special, default_seed=request_seed(args),
                          sampling=RequestDefaults(args.temperature, args.top_k, args.top_p, args.min_p,
                                                   args.n_predict, args.reasoning_format, args.reasoning_budget,
                                                   args.verbose),
                          api_key=args.api_key, max_body_bytes=args.max_body_mib << 20,
                          prompt_cache=prompt_cache(args.cache_ram), slot_save_dir=slot_save_dir(args.slot_save_path),
                          metrics=args.metrics, slots_endpoint=args.slots, props_endpoint=args.props,
                          cors=CORSPolicy(args.cors_origins, args.cors_methods, args.cors_headers,
                                          args.cors_credentials),
                          sleep_idle_s=args.sleep_idle_seconds if args.sleep_idle_seconds > 0 else None,
                          vertex=vertex, step_tokens=args.batch_size)
    app = create_app(SlotPool(models), config)
    log.info("%d slot(s), n_ctx %d each%s; requests up to %d MiB; listening on %s", args.parallel, models[0].n_ctx,
             " (--kv-unified: -c for every slot)" if args.kv_unified else "", args.max_body_mib,
             ", ".join(f"http://{host}:{args.port}" for host in args.host))
    # its graceful timeout outlasts the grace running generations get (stopping.py), so uvicorn has nothing left to
    # cancel; it exits non-zero by itself when it cannot bind its one address
    options = dict(log_level="debug" if args.verbose else "info", timeout_graceful_shutdown=GRACE_S + 5)
    if len(args.host) == 1:
        uvicorn.run(app, host=args.host[0], port=args.port, **options)
        return
    sockets = [listen_socket(host, args.port) for host in args.host]
    uvicorn.Server(uvicorn.Config(app, host=args.host[0], port=args.port, **options)).run(sockets=sockets)


def listen_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to host:port, for uvicorn to listen on (an IPv6 address binds IPv6 only, as in
    llama-server). Raises OSError naming the address."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
        sock = socket.socket(family, kind, proto)
    except OSError as e:
        raise OSError(f"--host {host}: {e.strerror or e}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
    except OSError as e:
        sock.close()
        raise OSError(f"--host {host}: cannot listen on port {port}: {e.strerror or e}") from None
    return sock


if __name__ == "__main__":
    raise SystemExit(main())
