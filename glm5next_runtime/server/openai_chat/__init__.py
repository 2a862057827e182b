"""OpenAI's chat completions and completions (/v1/chat/completions, /v1/completions, /v1/models): routes.py, and
replies.py their response bodies, schemas.py the completions request."""
from .routes import create_openai_router

__all__ = ["create_openai_router"]
