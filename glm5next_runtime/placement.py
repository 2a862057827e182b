"""Which device holds each weight: llama-server's -ngl / --cpu-moe / --n-cpu-moe / -ot, as a pure function.

Layer counting follows llama.cpp (src/llama-model.cpp, load_tensors): the trunk layers 0..n_trunk-1 and the
output layer (output_norm + output, counted as layer n_trunk) form one list, and -ngl N offloads the last N
entries of it. So -ngl 1 offloads only the output layer, and -ngl n_trunk + 1 (or more) offloads everything.
The input embedding always stays on the CPU (llama.cpp: "very little benefit" to offloading it). The NextN
(draft) layer is not counted: it follows the last trunk layer unless a draft device is given.
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence

CPU = "CPU"
# llama.cpp's LLM_FFN_EXPS_REGEX: routed-expert weights (what --cpu-moe / --n-cpu-moe keep on the CPU)
EXPS_REGEX = re.compile(r"\.ffn_(up|down|gate|gate_up)_(ch|)exps")
_BLK = re.compile(r"^blk\.(\d+)\.")


def parse_override_tensor(specs: Iterable[str], devices: Sequence[str]) -> list[tuple[re.Pattern, str]]:
    """-ot / --override-tensor values -> [(compiled regex, device)], in order.

    Each spec is "REGEX=DEVICE" or several of them joined by commas (llama.cpp's syntax).
    Raises ValueError naming the spec, the regex or the device when one is malformed or unknown.
    """
    rules = []
    for spec in specs:
        for item in spec.split(","):
            pattern, sep, device = item.rpartition("=")
            if not sep or not pattern:
                raise ValueError(f"--override-tensor {item!r}: expected REGEX=DEVICE")
            if device not in devices:
                raise ValueError(f"--override-tensor {item!r}: unknown device {device!r} "
                                 f"(available: {', '.join(devices)})")
            try:
                rules.append((re.compile(pattern), device))
            except re.error as e:
                raise ValueError(f"--override-tensor {item!r}: bad regex {pattern!r}: {e}") from None
    return rules


SPLIT_MODES = ("none", "layer")


def plan_placement(tensor_names: Iterable[str], n_layer_all: int, n_trunk: int, devices: Sequence[str],
                   n_gpu_layers: int = 0, cpu_moe: bool = False, n_cpu_moe: int = 0,
                   override_tensor: Sequence[str] = (), draft_device: str | None = None, split_mode: str = "layer",
                   tensor_split: Sequence[float] | None = None, main_gpu: int = 0) -> dict[str, str]:
    """Device name for every tensor name (GGUF names, e.g. "blk.3.ffn_up_exps.weight").

    n_layer_all / n_trunk: block_count and the trunk layers (layers n_trunk.. are NextN layers).
    devices: ggml device names, e.g. ["CPU", "CUDA0", "CUDA1"]; those that are not "CPU" receive offloaded
        layers. With no such device everything stays on the CPU (and -ngl etc. are accepted and change nothing).
    n_gpu_layers: -ngl, counted over trunk layers + output layer (see the module docstring).
    cpu_moe: --cpu-moe, every routed-expert tensor (ffn_*_exps) on the CPU, NextN layer included.
    n_cpu_moe: --n-cpu-moe N, the routed experts of layers 0..N-1 on the CPU.
    override_tensor: -ot "REGEX=DEVICE" rules, matched with re.search in order; the first match wins, and
        these rules come before --cpu-moe / --n-cpu-moe.
    draft_device: device of the NextN layer (default: the device of the last trunk layer).
    split_mode: -sm, "layer" (the offloaded layers are split over the devices in tensor_split proportions, in
        order) or "none" (all of them on device main_gpu).
    tensor_split: -ts, a proportion per offload device (default: equal; llama.cpp defaults to free memory).
    main_gpu: -mg, the offload device used with split_mode "none" (index among the non-CPU devices).
    Raises ValueError naming the argument for negative counts, an unknown device or split mode, a tensor_split
    that does not fit the devices, a main_gpu out of range, or a bad -ot rule.
    """
    devices = list(devices)
    if CPU not in devices:
        raise ValueError(f"devices {devices}: the CPU device is missing")
    for name, value in (("n_gpu_layers", n_gpu_layers), ("n_cpu_moe", n_cpu_moe)):
        if value < 0:
            raise ValueError(f"{name} = {value}: must be >= 0")
    if not 0 <= n_trunk <= n_layer_all:
        raise ValueError(f"n_trunk = {n_trunk}: must be within [0, n_layer_all = {n_layer_all}]")
    if draft_device is not None and draft_device not in devices:
        raise ValueError(f"draft device {draft_device!r} is unknown (available: {', '.join(devices)})")
    rules = parse_override_tensor(override_tensor, devices)
    layer_device = _layer_devices(n_trunk, [d for d in devices if d != CPU], n_gpu_layers, split_mode,
                                  tensor_split, main_gpu)

    last_trunk = layer_device(n_trunk - 1) if n_trunk > 0 else CPU
    nextn_device = draft_device or last_trunk

    def default(name: str) -> str:
        m = _BLK.match(name)
        if m:
            il = int(m.group(1))
            if EXPS_REGEX.search(name) and (cpu_moe or il < n_cpu_moe):
                return CPU
            return layer_device(il) if il < n_trunk else nextn_device
        if name.startswith(("output.", "output_norm.")):
            return layer_device(n_trunk)
        return CPU  # token_embd and anything unknown

    plan = {}
    for name in tensor_names:
        plan[name] = next((dev for rx, dev in rules if rx.search(name)), None) or default(name)
    return plan


def _layer_devices(n_trunk: int, gpus: list[str], n_gpu_layers: int, split_mode: str,
                   tensor_split: Sequence[float] | None, main_gpu: int):
    """il -> device of trunk layer il (il = n_trunk: the output layer), as llama.cpp's load_tensors assigns them:
    the last n_gpu_layers entries are offloaded; with split_mode "layer" offloaded entry j of n goes to the device
    whose cumulative tensor_split share first exceeds j / n."""
    if split_mode not in SPLIT_MODES:
        raise ValueError(f"split_mode {split_mode!r}: expected one of {', '.join(SPLIT_MODES)}")
    if split_mode == "none" and gpus and not 0 <= main_gpu < len(gpus):
        raise ValueError(f"main_gpu = {main_gpu}: expected 0..{len(gpus) - 1} (devices: {', '.join(gpus)})")
    if tensor_split is not None and (len(tensor_split) > max(len(gpus), 1) or any(x < 0 for x in tensor_split)
                                     or sum(tensor_split) <= 0):
        raise ValueError(f"tensor_split {list(tensor_split)}: expected at most {len(gpus)} non-negative "
                         f"proportions with a positive sum (one per device: {', '.join(gpus) or 'none'})")
    if split_mode == "none" and gpus:
        gpus = [gpus[main_gpu]]
        tensor_split = None
    n_offload = min(n_gpu_layers, n_trunk + 1) if gpus else 0
    start = n_trunk + 1 - n_offload
    shares = list(tensor_split or [1.0] * len(gpus)) + [0.0] * (len(gpus) - len(tensor_split or gpus))
    cumulative = [sum(shares[:i + 1]) / sum(shares) for i in range(len(gpus))]

    def layer_device(il: int) -> str:
        if il < start:
            return CPU
        frac = (il - start) / n_offload
        return gpus[min(next((i for i, c in enumerate(cumulative) if c > frac), len(gpus) - 1), len(gpus) - 1)]

    return layer_device


def describe_placement(plan: dict[str, str]) -> str:
    """One line for the load log, e.g. "CPU: 120 tensors, CUDA0: 31 tensors"."""
    counts = Counter(plan.values())
    return ", ".join(f"{dev}: {n} tensors" for dev, n in sorted(counts.items()))
