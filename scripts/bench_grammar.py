"""Grammar-constrained decoding vs unconstrained on one prompt: decode tokens/s and draft-MTP acceptance (mean
accepted length), with speculation on and off (issue 13 item 3's figures).

    .venv/bin/python scripts/bench_grammar.py [-m model.gguf] [-t 2] [-r 5] [--n-max 3]

Without -m it converts the bundled demo model (models/glm5next-small) to q8_0 in a temporary folder. Both runs are
greedy on the same prompt and generate the same number of tokens: the constrained run (a JSON schema of 6 records
that ends after ~200 tokens here) goes first, the unconstrained one then takes that many. Medians of r runs, each
interleaved constrained / unconstrained so that load on the machine hits both alike.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "RECORDS = "
RECORD = {"type": "object", "properties": {"key": {"type": "string", "maxLength": 8},
                                           "value": {"type": "integer", "minimum": 0, "maximum": 99}},
          "required": ["key", "value"], "additionalProperties": False}
SCHEMA = {"type": "array", "items": RECORD, "minItems": 6, "maxItems": 6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", type=Path, help="a glm5next GGUF (default: the bundled model as q8_0)")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-r", "--repetitions", type=int, default=5)
    ap.add_argument("--n-max", type=int, default=3, help="drafts per round with speculation on")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.model or convert_bundled(Path(tmp))
        run(path, args.threads, args.repetitions, args.n_max)


def convert_bundled(folder: Path) -> Path:
    from glm5next_convert import convert
    return convert(ROOT / "models" / "glm5next-small", folder / "glm5next-small-q8_0.gguf", outtype="q8_0",
                   progress=False, log=lambda m: None)


def run(path: Path, threads: int, repetitions: int, n_max: int) -> None:
    from glm5next_runtime import Model
    model = Model(path, n_ctx=1024, n_threads=threads, spec_type="draft-mtp", draft_n_max=n_max)
    print(f"{path.name}, -t {threads}, prompt {PROMPT!r}, {repetitions} runs, medians", file=sys.stderr)
    print("| decoding | n_max | tokens | t/s | mean accepted length | drafted / accepted |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for spec in (n_max, 0):
        rows: dict[str, list[dict]] = {"json schema": [], "unconstrained": []}
        for _ in range(repetitions):
            constrained = model.generate(PROMPT, max_tokens=512, temperature=0, json_schema=SCHEMA, spec_n_max=spec)
            n = len(constrained.tokens)
            free = model.generate(PROMPT, max_tokens=n, temperature=0, spec_n_max=spec)
            rows["json schema"].append(constrained.metrics)
            rows["unconstrained"].append(free.metrics)
        for name, metrics in rows.items():
            med = lambda key: statistics.median(m[key] for m in metrics)  # noqa: E731
            print(f"| {name} | {spec} | {med('n_generated'):.0f} | {med('decode_tokens_per_s'):.1f} | "
                  f"{med('mean_accepted_length'):.2f} | {med('n_drafted'):.0f} / {med('n_accepted'):.0f} |")


if __name__ == "__main__":
    main()
