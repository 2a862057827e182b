"""HF checkpoint directory -> GGUF file, streamed one tensor (one expert) at a time, written atomically
(output.py), after every check that can fail has passed."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import gguf
import numpy as np
from gguf import GGMLQuantizationType as QT

from . import loader_rules, plan_size, qtypes
from .checkpoint import Checkpoint, ConversionError
from .hparams import ARCHES, read_hparams, write_metadata
from .inputs import check_output
from .output import write_atomically
from .encoding import Encoder, pieces_of
from .tensors import PlannedTensor, build_plan, count_nextn, text_prefix
from .vocab import read_vocab

LAYOUTS = ("combined", "no-mtp", "mtp-only")


class _EncodedTensor:
    """What gguf.GGUFWriter.write_tensor_data needs of a tensor (`nbytes`, `tofile`): its pieces' bytes as the
    Encoder hands them over, so that only a few tensors (experts of a stacked tensor) are in memory at a time."""

    def __init__(self, t: PlannedTensor, qtype: QT, encoder: Encoder, on_bytes: Callable[[int], None]):
        self.t, self.encoder, self.on_bytes = t, encoder, on_bytes
        self.nbytes = qtypes.nbytes(t.shape, qtype)

    def tofile(self, fp) -> None:
        for _ in range(pieces_of(self.t)):  # experts are contiguous in the stacked tensor: written in turn
            data = self.encoder.next()
            fp.write(memoryview(np.ascontiguousarray(data)).cast("B"))
            self.on_bytes(data.nbytes)


def default_outfile(hf_dir: Path, outtype: str) -> Path:
    return hf_dir / f"{hf_dir.resolve().name}-{outtype}.gguf"


def convert(hf_dir: str | Path, outfile: str | Path | None = None, outtype: str = "auto",
            mtp_type: str | None = None, layout: str = "combined", arch: str = "glm5next",
            progress: bool = True, log: Callable[[str], None] = print, threads: int | None = None) -> Path:
    """Convert a GLM-5.3-Flash hub checkpoint to GGUF (docs/gguf.md) and return the output path.

    outtype: f32 | f16 | bf16 | q8_0 | q4_0 | auto (the source's precision; FP8 sources give bf16), the
    type of the large 2-D weights. mtp_type: the same for the NextN layer (default: outtype).
    layout: "combined" (trunk + NextN), "no-mtp" (trunk only) or "mtp-only" (NextN layer + token_embd,
    output_norm, output). arch: "glm5next" or "glm5-next" (the spelling llama.cpp 0.3.36 loads). threads: workers
    that read and quantize tensors ahead of the writer (encoding.py; None: the machine's cores); the output is the
    same bytes for any count.

    Everything is checked before the first tensor byte is written: the inputs are regular files and the output
    is none of them; config.json's fields have their JSON types; every tensor exists with its shape; the
    metadata passes the loader's own rules (loader_rules). Raises ConversionError (naming file, field, tensor
    or key) for bad input or an OS error on the output; the output file then does not exist, no temporary file
    is left (even after SIGKILL, on Linux), and an existing file at that path is left untouched.
    """
    if arch not in ARCHES:
        raise ConversionError(f"--arch {arch!r}: expected one of {', '.join(ARCHES)}")
    if layout not in LAYOUTS:
        raise ConversionError(f"layout {layout!r}: expected one of {', '.join(LAYOUTS)}")
    threads = (os.cpu_count() or 1) if threads is None else threads
    if threads < 1:
        raise ConversionError(f"-t {threads}: the worker threads must be >= 1")
    hf_dir = Path(hf_dir)
    ckpt = Checkpoint(hf_dir)
    hp = read_hparams(ckpt.config)
    vocab = read_vocab(ckpt.dir, hp)
    log(f"index_share_for_mtp_iteration = {str(hp.index_share).lower()} (from {hp.index_share_source})")

    n_found = count_nextn(ckpt, hp, text_prefix(ckpt))
    if hp.nextn_claimed > n_found:
        log(f"warning: config.json claims num_nextn_predict_layers = {hp.nextn_claimed} but the weights have no "
            f"layer {hp.n_trunk}; writing nextn_predict_layers = {n_found}")
    if layout == "mtp-only" and n_found == 0:
        raise ConversionError(f"{hf_dir}: --mtp-only needs the NextN layer (layer {hp.n_trunk}), which the weights lack")
    n_nextn = 0 if layout == "no-mtp" else n_found

    outtype = qtypes.AUTO[ckpt.source_dtype()] if outtype == "auto" else outtype
    for flag, value in (("--outtype", outtype), ("--mtp-type", mtp_type)):
        if value is not None and value not in qtypes.OUTTYPES:
            raise ConversionError(f"{flag} {value!r}: expected one of {', '.join(qtypes.OUTTYPES)} or auto")
    base = qtypes.OUTTYPES[outtype]
    nextn_base = qtypes.OUTTYPES[mtp_type or outtype]
    out = Path(outfile) if outfile else default_outfile(hf_dir, outtype)
    check_output(out, ckpt.input_files() + vocab.files)

    plan = build_plan(ckpt, hp, n_nextn, trunk=layout != "mtp-only")
    types = [qtypes.choose_type(t.name, t.shape, nextn_base if t.nextn else base) for t in plan]
    sizes = plan_size.sizes_by_type([t.shape for t in plan], types)
    log(f"plan: {len(plan)} tensors, {plan_size.describe(sizes)} -> {out}")
    plan_size.check_room(out, plan_size.output_bound(sum(sizes.values()), len(plan), vocab.files))

    def add_metadata(w: gguf.GGUFWriter) -> None:
        write_metadata(w, arch, hp, n_nextn, name=_text(ckpt.dir.resolve().name))
        w.add_file_type(qtypes.FILE_TYPES[base])
        w.add_quantization_version(gguf.GGML_QUANT_VERSION)
        vocab.write(w)

    loader_rules.check(arch, add_metadata, log)
    write_atomically(out, lambda path: _write(ckpt, add_metadata, plan, types, path, arch, progress, threads))
    log(f"wrote {out} ({len(plan)} tensors, {out.stat().st_size / 2**20:.1f} MiB, arch {arch}, "
        f"nextn_predict_layers {n_nextn})")
    return out


def _text(name: str) -> str:
    """`name` as valid UTF-8 (a directory name may hold undecodable bytes, escaped by Python)."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _write(ckpt: Checkpoint, add_metadata: Callable[[gguf.GGUFWriter], None], plan: list[PlannedTensor],
           types: list[QT], path: str, arch: str, progress: bool, threads: int) -> None:
    from tqdm import tqdm

    w = gguf.GGUFWriter(path=None, arch=arch)
    add_metadata(w)
    for t, qt in zip(plan, types):
        # float types go as their numpy dtype; the others as bytes (gguf-py derives the element shape)
        if qt in (QT.F32, QT.F16):
            w.add_tensor_info(t.name, t.shape, np.float32 if qt == QT.F32 else np.float16, qtypes.nbytes(t.shape, qt))
        else:
            byte_shape = gguf.quant_shape_to_byte_shape(t.shape, qt)
            w.add_tensor_info(t.name, byte_shape, np.uint8, qtypes.nbytes(t.shape, qt), raw_dtype=qt)
    total = sum(qtypes.nbytes(t.shape, qt) for t, qt in zip(plan, types))
    with tqdm(total=total, unit="B", unit_scale=True, desc="converting", disable=not progress) as bar, \
            Encoder(ckpt, plan, types, threads) as encoder:
        try:
            w.write_header_to_file(Path(path))
            w.write_kv_data_to_file()
            w.write_ti_data_to_file()
            for t, qt in zip(plan, types):
                bar.set_postfix_str(t.name, refresh=False)
                w.write_tensor_data(_EncodedTensor(t, qt, encoder, bar.update))
        finally:
            w.close()
