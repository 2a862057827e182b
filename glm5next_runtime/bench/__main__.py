"""`python -m glm5next_runtime.bench`: the glm5next-bench command, as the console script runs it."""
import sys

from .cli import main

sys.exit(main())
