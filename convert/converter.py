"""HF checkpoint directory -> GGUF file, streamed one tensor (one expert) at a time, written atomically."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable

import gguf
import numpy as np
from gguf import GGMLQuantizationType as QT

from . import qtypes
from .checkpoint import Checkpoint, ConversionError
from .hparams import ARCHES, read_hparams, write_metadata
from .tensors import PlannedTensor, build_plan, count_nextn, materialize, text_prefix
from .vocab import write_vocab

LAYOUTS = ("combined", "no-mtp", "mtp-only")


class _EncodedTensor:
    """What gguf.GGUFWriter.write_tensor_data needs of a tensor (`nbytes`, `tofile`), produced lazily so
    that only one tensor, or one expert of a stacked tensor, is in memory at a time."""

    def __init__(self, ckpt: Checkpoint, t: PlannedTensor, qtype: QT, on_bytes: Callable[[int], None]):
        self.ckpt, self.t, self.qtype, self.on_bytes = ckpt, t, qtype, on_bytes
        self.nbytes = qtypes.nbytes(t.shape, qtype)

    def tofile(self, fp) -> None:
        if self.t.kind == "stack":  # experts are contiguous in the stacked tensor: write them in turn
            for name, _ in self.t.sources:
                data = qtypes.encode(self.ckpt.read(name), self.qtype)
                data.tofile(fp)
                self.on_bytes(data.nbytes)
            return
        data = qtypes.encode(materialize(self.ckpt, self.t), self.qtype)
        data.tofile(fp)
        self.on_bytes(data.nbytes)


def default_outfile(hf_dir: Path, outtype: str) -> Path:
    return hf_dir / f"{hf_dir.resolve().name}-{outtype}.gguf"


def convert(hf_dir: str | Path, outfile: str | Path | None = None, outtype: str = "auto",
            mtp_type: str | None = None, layout: str = "combined", arch: str = "glm5next",
            progress: bool = True, log: Callable[[str], None] = print) -> Path:
    """Convert a GLM-5.3-Flash hub checkpoint to GGUF (gguf.md) and return the output path.

    outtype: f32 | f16 | bf16 | q8_0 | q4_0 | auto (the source's precision; FP8 sources give bf16), the
    type of the large 2-D weights. mtp_type: the same for the NextN layer (default: outtype).
    layout: "combined" (trunk + NextN), "no-mtp" (trunk only) or "mtp-only" (NextN layer + token_embd,
    output_norm, output). arch: "glm5next" or "glm5-next" (the spelling llama.cpp 0.3.36 loads).
    Raises ConversionError (naming file, tensor or key) for bad input; the output file then does not exist,
    and an existing file at that path is left untouched.
    """
    if arch not in ARCHES:
        raise ConversionError(f"--arch {arch!r}: expected one of {', '.join(ARCHES)}")
    if layout not in LAYOUTS:
        raise ConversionError(f"layout {layout!r}: expected one of {', '.join(LAYOUTS)}")
    hf_dir = Path(hf_dir)
    ckpt = Checkpoint(hf_dir)
    hp = read_hparams(ckpt.config)
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

    plan = build_plan(ckpt, hp, n_nextn, trunk=layout != "mtp-only")
    types = [qtypes.choose_type(t.name, t.shape, nextn_base if t.nextn else base) for t in plan]

    out = Path(outfile) if outfile else default_outfile(hf_dir, outtype)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        _write(ckpt, hp, plan, types, tmp, arch, base, n_nextn, progress)
        umask = os.umask(0)
        os.umask(umask)
        tmp.chmod(0o666 & ~umask)  # mkstemp made it private; the result gets the usual permissions
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    log(f"wrote {out} ({len(plan)} tensors, {out.stat().st_size / 2**20:.1f} MiB, arch {arch}, "
        f"nextn_predict_layers {n_nextn})")
    return out


def _write(ckpt: Checkpoint, hp, plan: list[PlannedTensor], types: list[QT], path: Path, arch: str, base: QT,
           n_nextn: int, progress: bool) -> None:
    from tqdm import tqdm

    w = gguf.GGUFWriter(path=None, arch=arch)
    write_metadata(w, arch, hp, n_nextn, name=ckpt.dir.resolve().name)
    w.add_file_type(qtypes.FILE_TYPES[base])
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    write_vocab(w, ckpt.dir, hp)
    for t, qt in zip(plan, types):
        # float types go as their numpy dtype; the others as bytes (gguf-py derives the element shape)
        if qt in (QT.F32, QT.F16):
            w.add_tensor_info(t.name, t.shape, np.float32 if qt == QT.F32 else np.float16, qtypes.nbytes(t.shape, qt))
        else:
            byte_shape = gguf.quant_shape_to_byte_shape(t.shape, qt)
            w.add_tensor_info(t.name, byte_shape, np.uint8, qtypes.nbytes(t.shape, qt), raw_dtype=qt)
    total = sum(qtypes.nbytes(t.shape, qt) for t, qt in zip(plan, types))
    with tqdm(total=total, unit="B", unit_scale=True, desc="converting", disable=not progress) as bar:
        try:
            w.write_header_to_file(path)
            w.write_kv_data_to_file()
            w.write_ti_data_to_file()
            for t, qt in zip(plan, types):
                bar.set_postfix_str(t.name, refresh=False)
                w.write_tensor_data(_EncodedTensor(ckpt, t, qt, bar.update))
        finally:
            w.close()
