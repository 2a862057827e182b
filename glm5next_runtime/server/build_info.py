"""What this build calls itself to clients: llama-server's `build_info` (GET /props) and `system_fingerprint` (every
OpenAI-shaped response and stream chunk). llama-server writes "b<build>-<commit>"; this server writes
"glm5next-<package version>", which changes only when the server does, as OpenAI's fingerprint is meant to."""
from __future__ import annotations

from importlib.metadata import version

BUILD_INFO = f"glm5next-{version('glm5next')}"
