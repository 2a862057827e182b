"""What glm5next-server's routes need besides the slots (built from the flags by main.py, read by app.py and
the surfaces' routes)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .body_limit import DEFAULT_MAX_BODY_MIB
from .cors import CORSPolicy
from .prompt_cache import PromptCache
from .request_defaults import RequestDefaults
from .stopping import GRACE_S
from .templates import TemplateWorkers
from .vertex import VertexSettings


@dataclass
class ServerConfig:
    """What the routes need besides the slots.

    model_name: the id /v1/models lists (the first --alias, else the file name); a response carries the
        request's `model` when it names one (any name: llama-server with one model answers them all).
    aliases, tags: --alias and --tags, listed in /v1/models.
    chat_template: None: chat is off (501); the server always has one (a built-in at least, main.py).
    sampling: the server-wide request defaults (--temp, --top-k, --top-p, --min-p, -n, --reasoning-format,
        --reasoning-budget).
    default_seed: the seed of requests that bring none (None: a random one each time).
    api_key: None: no authentication.
    max_body_bytes: larger request bodies get a 413 (--max-body-mib).
    grace_s: how long running generations may go on once the server is stopping (stopping.py).
    special: generated control tokens are text in responses (--special; llama-server's default is off).
    prompt_cache: the RAM prompt cache shared by the slots (--cache-ram; None: off).
    slot_save_dir: where the slot actions save and restore sequences (--slot-save-path; None: actions off).
    metrics, slots_endpoint, props_endpoint: GET /metrics (--metrics), GET /slots (--no-slots turns it off) and
        POST /props (--props) are served; otherwise they answer 501, as in llama-server.
    cors: --cors-origins, --cors-methods, --cors-headers, --cors-credentials (cors.py).
    sleep_idle_s: --sleep-idle-seconds: free the model after this many idle seconds (sleep.py; None: never).
    step_tokens: the prompt tokens one step of the scheduler evaluates at most, all slots together (-b, llama-server's
        logical batch; each slot's ubatch is at most -ub); None: one ubatch.
    vertex: Vertex AI's predict route (AIP_MODE=PREDICTION, vertex/; None: off).
    """
    model_name: str
    chat_template: TemplateWorkers | None = None
    default_seed: int | None = None
    api_key: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_MIB << 20
    grace_s: float = GRACE_S
    special: bool = False
    prompt_cache: PromptCache | None = None
    slot_save_dir: Path | None = None
    aliases: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    sampling: RequestDefaults = RequestDefaults()
    metrics: bool = False
    slots_endpoint: bool = True
    props_endpoint: bool = False
    cors: CORSPolicy = CORSPolicy()
    sleep_idle_s: float | None = None
    vertex: VertexSettings | None = None
    step_tokens: int | None = None
