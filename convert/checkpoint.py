"""Lazy access to a Hugging Face GLM-5.3-Flash checkpoint directory (hub layout).

Only safetensors headers are read up front; a tensor's data is read when asked for, one tensor at a time,
so that converting a 300+ GB checkpoint needs memory for about one layer's experts.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .errors import ConversionError
from .fields import Fields, json_type
from .inputs import read_json, regular_file

FP8_DTYPES = ("F8_E4M3",)
# safetensors dtypes a weight may have (integer or boolean weights are not a GLM-5.3-Flash checkpoint)
FLOAT_DTYPES = ("F64", "F32", "F16", "BF16", *FP8_DTYPES)
INDEX_NAME = "model.safetensors.index.json"

__all__ = ["Checkpoint", "ConversionError", "FLOAT_DTYPES", "FP8_DTYPES"]


class Checkpoint:
    """A checkpoint directory: `config.json`, safetensors shards (with or without an index), tokenizer.

    Raises ConversionError when the config or the weights are missing, unreadable, not regular files, or when
    the config is not a JSON object or its quantization_config.weight_block_size is not two positive integers.
    """

    def __init__(self, hf_dir: str | Path):
        self.dir = Path(hf_dir)
        if not self.dir.is_dir():
            raise ConversionError(f"{self.dir}: not a directory")
        cfg_path = regular_file(self.dir / "config.json", True, "a Hugging Face checkpoint has a config.json")
        self.config = read_json(cfg_path)
        if not isinstance(self.config, dict):
            raise ConversionError(f"{cfg_path}: expected a JSON object, got {json_type(self.config)}")
        self.index: Path | None = None
        self.files = self._weight_files()
        self._handles: dict[Path, object] = {}
        self._where: dict[str, Path] = {}
        for f in self.files:
            for name in self._keys(f):
                self._where[name] = f
        qcfg = Fields("config.json", [self.config]).object("quantization_config")
        self.fp8_block = tuple(qcfg.int_array("weight_block_size", [128, 128], n=2, lo=1))

    def input_files(self) -> list[Path]:
        """Every file of the checkpoint read so far: config.json, the index (if any) and the weight files."""
        return [self.dir / "config.json", *([self.index] if self.index else []), *self.files]

    def _weight_files(self) -> list[Path]:
        index = regular_file(self.dir / INDEX_NAME, required=False)
        shards = [regular_file(f, True) for f in sorted(self.dir.glob("*.safetensors"))]
        if index is None:
            if not shards:
                raise ConversionError(f"{self.dir}: no *.safetensors weight files")
            return shards
        self.index = index
        doc = read_json(index)
        weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
        if not isinstance(weight_map, dict):
            raise ConversionError(f"{index}: not a safetensors index (no \"weight_map\" object)")
        entries = Fields(str(index), [weight_map], ["weight_map."])
        names = sorted({entries.string(k) for k in weight_map})
        files = []
        for n in names:
            f = self.dir / n
            if Path(n).is_absolute() or ".." in Path(n).parts:
                raise ConversionError(f"{index}: weight_map names {n!r}, which is not a file in {self.dir}")
            if regular_file(f, required=False) is None:
                raise ConversionError(f"{f}: listed in {index.name} but missing")
            files.append(f)
        # shards the index does not list (e.g. a separate MTP file) are read too
        return files + [f for f in shards if f not in files]

    def _keys(self, f: Path) -> list[str]:
        try:
            return list(self._open(f).keys())
        except ConversionError:
            raise
        except Exception as e:
            raise ConversionError(f"{f}: unreadable safetensors header ({_one_line(e)})") from e

    def _open(self, f: Path):
        if f not in self._handles:
            from safetensors import safe_open
            try:
                self._handles[f] = safe_open(str(f), framework="pt")
            except Exception as e:  # safetensors raises its own error type for truncated/corrupt files
                raise ConversionError(f"{f}: unreadable safetensors file ({_one_line(e)})") from e
        return self._handles[f]

    def _header(self, name: str, what: str):
        """get_shape() (what="shape") or get_dtype() of tensor `name`'s header entry. Raises ConversionError
        naming file and tensor when safetensors cannot give it."""
        f = self._where[name]
        try:
            entry = self._open(f).get_slice(name)
            return entry.get_shape() if what == "shape" else entry.get_dtype()
        except ConversionError:
            raise
        except Exception as e:
            raise ConversionError(f"{f}: unreadable header entry of tensor {name} ({_one_line(e)})") from e

    # ------------------------------------------------------------------------------------- metadata

    def names(self) -> set[str]:
        return set(self._where)

    def file_of(self, name: str) -> Path:
        return self._where[name]

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(int(d) for d in self._header(name, "shape"))

    def dtype(self, name: str) -> str:
        """safetensors dtype string: F32, BF16, F16, F8_E4M3, ..."""
        return str(self._header(name, "dtype"))

    def __contains__(self, name: str) -> bool:
        return name in self._where

    # ----------------------------------------------------------------------------------------- data

    def read(self, name: str) -> np.ndarray:
        """The tensor as float32 numpy, FP8 weights dequantized with their 128x128 block `*_scale_inv`.

        Raises ConversionError naming file and tensor when the data cannot be read (e.g. truncated file).
        """
        import torch
        f = self._where[name]
        try:
            t = self._read_data(f, name)
        except Exception as e:
            raise ConversionError(f"{f}: cannot read tensor {name} ({_one_line(e)})") from e
        if self.dtype(name) in FP8_DTYPES:
            t = self._dequant_fp8(name, t)
        return t.to(torch.float32).numpy()

    @staticmethod
    def _read_data(f: Path, name: str):
        """Tensor `name` of shard `f` through a mapping of its own, unmapped once read (issue 50: the shards' cached
        handles kept every page read mapped, so the resident set grew with the bytes converted)."""
        from safetensors import safe_open
        with safe_open(str(f), framework="pt") as h:
            return h.get_tensor(name)

    def _dequant_fp8(self, name: str, q):
        """w = q * scale over (block_rows x block_cols) blocks, before any cast (docs/gguf.md, Tensors)."""
        import torch
        scale_name = name + "_scale_inv"
        if scale_name not in self._where:
            raise ConversionError(f"{self._where[name]}: FP8 tensor {name} has no {scale_name}")
        try:
            scale = self._read_data(self._where[scale_name], scale_name).to(torch.float32)
        except Exception as e:
            raise ConversionError(f"{self._where[scale_name]}: cannot read tensor {scale_name} "
                                  f"({_one_line(e)})") from e
        br, bc = self.fp8_block
        rows, cols = q.shape
        nbr, nbc = -(-rows // br), -(-cols // bc)
        if scale.shape != (nbr, nbc):
            raise ConversionError(f"{self._where[scale_name]}: {scale_name} has shape {tuple(scale.shape)}, "
                                  f"expected {(nbr, nbc)} for {name} {tuple(q.shape)}")
        # each block times its scale, the blocks as a view (no tensor of per-element scales: issue 50); a ragged
        # edge is padded to whole blocks and cut off again
        w = q.to(torch.float32)
        if (nbr * br, nbc * bc) != (rows, cols):
            w = torch.nn.functional.pad(w, (0, nbc * bc - cols, 0, nbr * br - rows))
        w = (w.view(nbr, br, nbc, bc) * scale[:, None, :, None]).view(nbr * br, nbc * bc)
        return w[:rows, :cols]

    def source_dtype(self) -> str:
        """The dtype of the big weights: 'fp8', 'bf16', 'f16' or 'f32' (for --outtype auto)."""
        seen = {self.dtype(n) for n in self._where if n.endswith("_proj.weight")}
        for st, name in (("F8_E4M3", "fp8"), ("BF16", "bf16"), ("F16", "f16")):
            if st in seen:
                return name
        return "f32"


def _one_line(e: Exception) -> str:
    """An exception's message on one line (safetensors' and torch's can span several)."""
    return " ".join(str(e).split()) or type(e).__name__
