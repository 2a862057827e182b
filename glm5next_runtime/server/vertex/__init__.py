"""Google Cloud Vertex AI's prediction protocol for custom containers (AIP_MODE=PREDICTION): routes.py."""
from .routes import VertexSettings, add_vertex_routes

__all__ = ["VertexSettings", "add_vertex_routes"]
