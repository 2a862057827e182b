"""`python -m glm5next_runtime.server`: the same as the glm5next-server command."""
from .main import main

if __name__ == "__main__":
    raise SystemExit(main())
