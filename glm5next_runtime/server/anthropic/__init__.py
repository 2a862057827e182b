"""Anthropic's Messages API (/v1/messages, /v1/messages/count_tokens): routes.py (errors in Anthropic's shape),
schemas.py its request bodies as chat requests, blocks.py their content blocks, tools.py tool use as the chat's,
replies.py the message and its stream of events."""
from .routes import create_anthropic_router

__all__ = ["create_anthropic_router"]
