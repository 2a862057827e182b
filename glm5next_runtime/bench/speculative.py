"""The draft-MTP rows (--spec-n-max, ours only): SpecLength (one --spec-n-max entry), spec_prompts (the rows'
prompts: random ids or the first D tokens of --spec-prompts files) and run_spec_rows, which times tg N through
draft-MTP rounds against the same rounds without drafts, back to back, and adds up the acceptance they saw."""
from __future__ import annotations

import argparse
import math
from typing import Any, NamedTuple

from .errors import BenchError
from .rows import Inputs, row_name
from .runners import OursRunner
from .stats import Stats, paired_speedup


class SpecLength(NamedTuple):
    """A --spec-n-max entry: n_max drafts every round, or adaptive lengths up to n_max (`auto`, `autoN`)."""
    n_max: int
    adaptive: bool

    def __str__(self) -> str:  # in a row's name
        return f"mtp auto{self.n_max}" if self.adaptive else f"mtp{self.n_max}"


def spec_prompts(ours: OursRunner, args: argparse.Namespace, texts: list[str],
                 inputs: Inputs) -> dict[int, list[list[int]]]:
    """Depth -> the draft-MTP rows' prompts: each text's first `depth` token ids, or (no texts) the random ids of
    the depth prefill followed by the first tg input. Raises BenchError for a text shorter than a depth."""
    if not texts:
        return {d: [inputs.depth[:d] + inputs.gen[:1]] for d in args.n_depth}
    ids = [ours.model.tokenize(t, parse_special=False) for t in texts]
    for path, i in zip(args.spec_prompts, ids):
        if len(i) < max(args.n_depth):
            raise BenchError(f"--spec-prompts: {path} has {len(i)} tokens, fewer than -d {max(args.n_depth)}")
    return {d: [i[:d] for i in ids] for d in args.n_depth}


def _summed_stats(stats: list[dict[str, Any]]) -> dict[str, Any]:
    """The generator counters of several generations added up; acceptance per position and mean accepted length
    recomputed from the sums (docs/runtime.md, Metrics: accepted drafts + 1 per round that carried drafts)."""
    width = max(len(s["drafted_at"]) for s in stats)
    def column(key: str) -> list[int]:
        return [sum(s[key][i] for s in stats if i < len(s[key])) for i in range(width)]
    drafted, accepted = column("drafted_at"), column("accepted_at")
    rounds = sum(s["n_drafts"] for s in stats)
    n_accepted = sum(s["n_accepted"] for s in stats)
    return {"n_drafts": rounds, "n_drafted": sum(s["n_drafted"] for s in stats), "n_accepted": n_accepted,
            "drafted_at": drafted, "accepted_at": accepted,
            "acceptance_per_position": [a / d if d else 0.0 for a, d in zip(accepted, drafted)],
            "mean_accepted_length": (n_accepted + rounds) / rounds if rounds else 0.0,
            "rounds_at_length": [sum(s["rounds_at_length"][k] for s in stats if k < len(s["rounds_at_length"]))
                                 for k in range(max(len(s["rounds_at_length"]) for s in stats))],
            "draft_ms": sum(s["draft_ms"] for s in stats), "verify_ms": sum(s["verify_ms"] for s in stats)}


def _spec_pair(ours: OursRunner, prompt: list[int], n_gen: int, length: SpecLength, accept: float | None, share: str,
               draft_type: str, drafted_first: bool) -> tuple[int, float, float, dict]:
    """One back-to-back pair on `prompt`: the rounds without drafts and with `length`'s. Returns (tokens, seconds
    without, seconds with, the drafting generator's counters). Which runs first alternates from pair to pair (the
    caller's drafted_first): plain decoding timed against itself came out ~3% faster or slower in second place,
    depending on the machine."""
    def plain() -> tuple[int, float, dict]:
        return ours.spec_decode(prompt, n_gen, 0, None, share, draft_type)

    def drafted() -> tuple[int, float, dict]:
        return ours.spec_decode(prompt, n_gen, length.n_max, accept, share, draft_type, length.adaptive)

    if drafted_first:
        (_, s_on, stats), (n, s_off, _) = drafted(), plain()
    else:
        (n, s_off, _), (_, s_on, stats) = plain(), drafted()
    return n, s_off, s_on, stats


def run_spec_rows(ours: OursRunner, args: argparse.Namespace, prompts: dict[int, list[list[int]]],
                  n_ctx: int) -> list[dict[str, Any]]:
    """For each tg N @ depth and each (n_max, index share, draft type): the median t/s of draft-MTP rounds and of
    the same rounds without drafts, prompt by prompt, repetition by repetition, and the acceptance the rounds saw
    (summed over the prompts). first_speedup: the paired speedup of the first repetition alone (the warm-up unless
    --no-warmup), what a fresh process's first requests get (issue 28): in the first row of a draft type the graphs
    of each round's shapes are built on the way and, with adaptive lengths on real prompts, the model's draft length
    policy learns from its prior there (the first row of its n_max; it carries over to later rows, as a server
    slot's does over requests; with synthetic acceptance the rows of one acceptance share a policy of their own,
    Model._draft_length_policy)."""
    rows = []
    gens = [n for n in args.n_gen if n > 0]
    profiles = []  # (row, its first prompt, n_gen, length, share, draft type): --op-profile's, run last
    combos = [(n_max, share, dt) for n_max in args.spec_n_max for share in args.spec_index_share
              for dt in args.spec_draft_type]
    for depth in args.n_depth:
        for n_gen in gens:
            if depth + 1 + n_gen + max(s.n_max for s in args.spec_n_max) > n_ctx:
                continue
            for length, share, dt in combos:
                on, off = Stats(), Stats()
                log_ratios = []  # per (repetition, prompt): log(seconds without drafts / seconds with)
                first = []  # the same for the first repetition: the first requests of this row (see below)
                for rep in range(args.repetitions + (0 if args.no_warmup else 1)):
                    n, s_off, s_on = 0, 0.0, 0.0
                    stats = []
                    for i, prompt in enumerate(prompts[depth]):
                        n_p, plain, drafted, st = _spec_pair(ours, prompt, n_gen, length, args.spec_accept, share, dt,
                                                             drafted_first=(rep + i) % 2 == 1)
                        n, s_off, s_on = n + n_p, s_off + plain, s_on + drafted
                        stats.append(st)
                        log_ratio = math.log(plain / drafted)
                        if rep or args.no_warmup:
                            log_ratios.append(log_ratio)
                        if rep == 0:
                            first.append(log_ratio)
                    if rep or args.no_warmup:
                        off.tokens.append(n), off.seconds.append(s_off)
                        on.tokens.append(n), on.seconds.append(s_on)
                total = _summed_stats(stats)
                name = row_name("tg", n_gen, depth) + f" {length}" + (f" share {share}" if share != "auto" else "") \
                    + (f" draft {dt}" if dt != "auto" else "") \
                    + (f" x {len(prompts[depth])} prompts" if args.spec_prompts else "")
                rows.append({"test": name, "n_gen": n_gen, "n_depth": depth, "n_max": length.n_max,
                             "adaptive": length.adaptive, "index_share": share,
                             "draft_type": dt, "n_prompts": len(prompts[depth]), "spec": on.summary(),
                             "no_spec": off.summary(),
                             **paired_speedup(log_ratios),
                             **{"first_" + k: v for k, v in paired_speedup(first).items()},
                             **{k: total[k] for k in ("mean_accepted_length", "acceptance_per_position",
                                                      "rounds_at_length", "draft_ms", "verify_ms")}})
                if args.op_profile:
                    profiles.append((rows[-1], prompts[depth][0], n_gen, length, share, dt))
    # after every timed row: a profiled generation's costs (each node synced) would otherwise teach the model's draft
    # length policy (adaptive rows on real prompts share it) timings that skew the rows after it
    for row, prompt, n_gen, length, share, dt in profiles:
        row["op_profile"] = _op_profiles(ours, prompt, n_gen, length, args.spec_accept, share, dt)
    return rows


def _op_profiles(ours: OursRunner, prompt: list[int], n_gen: int, length: SpecLength, accept: float | None, share: str,
                 draft_type: str) -> dict[str, dict[str, Any]]:
    """--op-profile: {"no drafts" | "drafts": {graph kind: dict(runs, ops={op: (ms, nodes)})}} of one generation of
    n_gen tokens after `prompt` each, every graph node timed alone (runtime/op_profile.h). With adaptive lengths the
    rounds' lengths are the policy's choices under profiling (each node's sync inflates costs, verify rows relatively
    less): the per-graph costs are the profile's point, not the mix."""
    plain = ours.spec_decode(prompt, n_gen, 0, None, share, draft_type, op_profile=True)[2]["op_profile"]
    drafted = ours.spec_decode(prompt, n_gen, length.n_max, accept, share, draft_type, length.adaptive,
                               op_profile=True)[2]["op_profile"]
    return {"no drafts": plain, "drafts": drafted}
