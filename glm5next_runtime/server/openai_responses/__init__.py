"""OpenAI's Responses API (/v1/responses): routes.py, schemas.py its request body as a chat request, items.py its
input items, tools.py function tools and calls as the chat's, replies.py the response and its stream of events."""
from .routes import create_responses_router

__all__ = ["create_responses_router"]
