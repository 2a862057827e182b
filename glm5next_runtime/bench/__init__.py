"""glm5next-bench: llama-bench style throughput of the runtime, optionally side by side with llama-cpp-python.

    glm5next-bench -m FILE [-p 512] [-n 128] [-d 0,1024] [-t THREADS] [-b 512] [-r 3] [--llama-cpp] [-o md|csv|json]

Tests (llama-bench meaning):
  pp N @ dD  time to evaluate an N-token prompt on top of a D-token sequence (the D-token prefill is not timed)
  tg N @ dD  time to generate N tokens one eval call at a time after a D-token prefill; only the eval calls are
             timed. The fed tokens are a fixed pseudo-random sequence (llama-bench's way; identical for every
             engine and repetition) or, with --tg-tokens argmax, each step's greedy token.
Every test is run -r times per engine; the table gives the median t/s +- its stdev (json/csv add min, max and the
samples). With --llama-cpp the same rows run on llama-cpp-python over the same file and threads in the same
process, interleaved repetition by repetition (ours, then upstream) so machine noise hits both alike, and a ratio
column (ours / upstream, of the medians) is added.

Resident memory (Linux /proc/self/status) is reported after each engine's load and first eval: the weights are
memory-mapped, so RssAnon growth should be caches and compute buffers only, never a copy of the file.

Rows are a list of Row(name, run, params): `run(runner)` performs one timed repetition on a Runner and returns
(tokens, seconds).

Speculative rows (--spec-n-max, ours only: upstream has no draft-MTP for this model) time tg N through the
draft-MTP rounds, next to the same rounds without drafts, for each n_max, index-sharing setting and draft type
(an n_max drafts that many every round; `auto` or `autoN` drafts what the draft length policy chooses each round,
at most 3 or N: the default, --spec-draft-adaptive on; "rounds by length" counts its choices);
--spec-accept L fixes the mean accepted length per round (synthetic acceptance, docs/runtime.md, Synthetic acceptance) so that speed can be
compared at a given acceptance whatever the weights. --spec-prompts FILE... runs them on real text instead: each
file's first D tokens (D from -d) are a prompt, the rounds generate N tokens greedily after each, and a row sums
its time and acceptance over all the prompts. Their speedup is the geometric mean, over prompts and repetitions, of
the time ratio of a prompt's rounds without drafts and then with, run back to back, ± its standard error.
"""
from .cli import main, run
from .errors import BenchError
from .rows import Inputs, Row, build_rows
from .runners import LlamaCppRunner, OursRunner, Runner
from .speculative import SpecLength
from .stats import paired_speedup

__all__ = ["BenchError", "Inputs", "LlamaCppRunner", "OursRunner", "Row", "Runner", "SpecLength", "build_rows", "main",
           "paired_speedup", "run"]
