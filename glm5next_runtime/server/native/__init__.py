"""llama-server's native endpoints (/completion, /tokenize, /detokenize, /apply-template, /props, /slots):
routes.py, schemas.py their request bodies, slot_actions.py POST /slots/{id}?action=save|restore|erase."""
from .routes import create_native_router
from .slot_actions import create_slot_router

__all__ = ["create_native_router", "create_slot_router"]
