"""The report rendered for reading: render_md (llama-bench's table, the traffic between devices and the resident
memory), render_spec_md (the draft-MTP rows' table) and render_csv (one line per row); json is the report as it is,
and memory_table goes to stderr next to csv."""
from __future__ import annotations

import csv
import io
from typing import Any

from .model_info import human_bytes, human_params
from .runners import OURS, UPSTREAM


def _tps_cell(s: dict[str, Any]) -> str:
    return f"{s['tps_median']:.2f} ± {s['tps_stdev']:.2f}"


def _table(header: list[str], align: list[str], lines: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in lines)) if lines else len(h) for i, h in enumerate(header)]
    def fmt(cells: list[str]) -> str:
        return "| " + " | ".join(c.rjust(w) if a == "r" else c.ljust(w)
                                 for c, w, a in zip(cells, widths, align)) + " |"
    rule = "| " + " | ".join("-" * (w - 1) + ":" if a == "r" else "-" * w for w, a in zip(widths, align)) + " |"
    return "\n".join([fmt(header), rule, *(fmt(r) for r in lines)])


def render_md(report: dict[str, Any]) -> str:
    info, engines = report["model"], report["engines"]
    header = ["model", "size", "params", "backend", "threads", "test", "t/s"]
    align = ["l", "r", "r", "l", "r", "r", "r"]
    if UPSTREAM in engines:
        header += ["llama.cpp t/s", "ratio"]
        align += ["r", "r"]
    lines = []
    for row in report["rows"]:
        cells = [info["model"], human_bytes(info["size_bytes"]), human_params(info["params"]), info["backend"],
                 str(info["threads"]), row["test"], _tps_cell(row[OURS])]
        if UPSTREAM in engines:
            cells += [_tps_cell(row[UPSTREAM]), f"{row['ratio']:.3f}"]
        lines.append(cells)
    out = [_table(header, align, lines), "",
           f"t/s: median ± stdev of {report['repetitions']} runs; n_batch {info['n_batch']}, n_ctx {info['n_ctx']}, cache {info['cache_type_k']}"
           + (", ratio = glm5next / llama.cpp (medians)" if UPSTREAM in engines else "")]
    if info["traffic"]["decode"]["splits"] > 1:
        out += ["", "between devices, per graph run (copy time measured with every node synced; share = of the first "
                "pp / tg row's time per ubatch / token):", _traffic_table(report)]
    mem = report.get("memory")
    if mem:
        out += ["", f"resident memory (file {human_bytes(info['file_bytes'])}, memory-mapped):", memory_table(mem)]
    return "\n".join(out)


def _traffic_table(report: dict[str, Any]) -> str:
    traffic = report["model"]["traffic"]
    first_tps = {kind: next((r[OURS]["tps_median"] for r in report["rows"] if r["test"].startswith(kind)), None)
                 for kind in ("pp", "tg")}
    lines = []
    for graph, kind in (("decode", "tg"), ("verify4", None), ("prefill", "pp"), ("draft step", None)):
        if graph not in traffic:
            continue
        t = traffic[graph]
        tps = first_tps.get(kind) if kind else None
        share = f"{100 * t['copy_seconds'] * tps / t['rows']:.1f}%" if tps else "-"
        rows = f"{t['rows']} row" + ("s" if t["rows"] > 1 else "")
        lines.append([f"{graph} ({rows})", str(t["splits"]), f"{t['bytes_copied'] / 1024:.1f} KiB",
                      f"{1e3 * t['copy_seconds']:.3f}", share])
    return _table(["graph", "splits", "copied", "copy ms", "share"], ["l", "r", "r", "r", "r"], lines)


def memory_table(mem: list[dict[str, Any]]) -> str:
    base = mem[0]["RssAnon"]
    lines = [[m["stage"], human_bytes(m["VmRSS"]), human_bytes(m["RssAnon"]), human_bytes(m["RssFile"]),
              human_bytes(m["RssAnon"] - base)] for m in mem]
    return _table(["stage", "RSS", "RssAnon", "RssFile", "RssAnon - baseline"], ["l", "r", "r", "r", "r"], lines)


def render_spec_md(rows: list[dict[str, Any]], accept: float | None) -> str:
    lines = [[r["test"], _tps_cell(r["spec"]), _tps_cell(r["no_spec"]), f"{r['speedup']:.3f} ± {r['speedup_se']:.3f}",
              f"{r['first_speedup']:.3f} ± {r['first_speedup_se']:.3f}", f"{r['mean_accepted_length']:.2f}",
              " ".join(f"{a:.2f}" for a in r["acceptance_per_position"]),
              " ".join(str(n) for n in r["rounds_at_length"]), f"{r['draft_ms']:.1f} / {r['verify_ms']:.1f}"]
             for r in rows]
    table = _table(["test", "t/s", "t/s no drafts", "speedup", "first rep", "accepted len", "accept per pos",
                    "rounds by length", "draft / verify ms"], ["l", "r", "r", "r", "r", "r", "l", "l", "r"], lines)
    how = "synthetic acceptance" if accept is not None else "real acceptance (greedy)"
    return (f"draft-MTP ({how}; speedup = the geometric mean of t/s / t/s of the same rounds without drafts, each "
            f"prompt and repetition a back-to-back pair, ± its standard error; first rep: the same over the first "
            f"repetition alone, the warm-up: a fresh process's first requests, graphs built and draft lengths learned "
            f"on the way; rounds by length: "
            f"rounds that drafted 0, 1, ... tokens; draft / verify ms: the last repetition, all prompts):\n{table}")


def render_op_profile_md(row: dict[str, Any], n_top: int = 4) -> str:
    """--op-profile's table for a draft-MTP row: per generation (no drafts, drafts) and graph kind, its runs, its ms
    per run and its costliest ops, and each generation's ms per token."""
    lines, per_token = [], []
    for run, graphs in row["op_profile"].items():
        total = 0.0
        for kind, g in sorted(graphs.items(), key=lambda kv: -sum(ms for ms, _ in kv[1]["ops"].values())):
            ms = sum(m for m, _ in g["ops"].values())
            total += ms
            top = sorted(g["ops"].items(), key=lambda kv: -kv[1][0])[:n_top]
            lines.append([run, kind, str(g["runs"]), f"{ms / g['runs']:.2f}",
                          ", ".join(f"{op} {m / g['runs']:.2f} ({m / ms:.0%})" for op, (m, _) in top)])
        per_token.append(f"{run} {total / row['n_gen']:.2f}")
    table = _table(["run", "graph", "runs", "ms/run", "costliest ops: ms/run (share)"], ["l", "l", "r", "r", "l"],
                   lines)
    return (f"op profile of {row['test']} (one generation without and one with drafts; every node timed alone, so "
            f"times run above an untimed run's; ms per token: {', '.join(per_token)}):\n{table}")


STAT_KEYS = ["tps_median", "tps_mean", "tps_stdev", "tps_min", "tps_max"]


def render_csv(report: dict[str, Any]) -> str:
    info, engines = report["model"], report["engines"]
    header = ["model", "size_bytes", "params", "backend", "threads", "n_batch", "test", "n_prompt", "n_gen",
              "n_depth", "repetitions"]
    header += [f"{e}_{k}" for e in engines for k in STAT_KEYS]
    if UPSTREAM in engines:
        header.append("ratio")
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for row in report["rows"]:
        cells = [info["model"], info["size_bytes"], info["params"], info["backend"], info["threads"],
                 info["n_batch"], row["test"], row["n_prompt"], row["n_gen"], row["n_depth"], report["repetitions"]]
        cells += [row[e][k] for e in engines for k in STAT_KEYS]
        if UPSTREAM in engines:
            cells.append(row["ratio"])
        w.writerow(cells)
    return buf.getvalue().rstrip("\n")
