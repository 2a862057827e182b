"""Lazy access to a Hugging Face GLM-5.3-Flash checkpoint directory (hub layout).

Only safetensors headers are read up front; a tensor's data is read when asked for, one tensor at a time,
so that converting a 300+ GB checkpoint needs memory for about one layer's experts.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

FP8_DTYPES = ("F8_E4M3",)


class ConversionError(Exception):
    """Bad input to the converter: the message names the file, the tensor or the key at fault."""


class Checkpoint:
    """A checkpoint directory: `config.json`, safetensors shards (with or without an index), tokenizer.

    Raises ConversionError when the config or the weights are missing or unreadable.
    """

    def __init__(self, hf_dir: str | Path):
        self.dir = Path(hf_dir)
        if not self.dir.is_dir():
            raise ConversionError(f"{self.dir}: not a directory")
        cfg_path = self.dir / "config.json"
        if not cfg_path.is_file():
            raise ConversionError(f"{cfg_path}: missing (a Hugging Face checkpoint has a config.json)")
        try:
            self.config = json.loads(cfg_path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ConversionError(f"{cfg_path}: not valid JSON ({e})") from e
        self.files = self._weight_files()
        self._handles: dict[Path, object] = {}
        self._where: dict[str, Path] = {}
        for f in self.files:
            for name in self._open(f).keys():
                self._where[name] = f
        qcfg = self.config.get("quantization_config") or {}
        self.fp8_block = tuple(qcfg.get("weight_block_size") or (128, 128))

    def _weight_files(self) -> list[Path]:
        index = self.dir / "model.safetensors.index.json"
        if index.is_file():
            try:
                names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
            except (json.JSONDecodeError, KeyError) as e:
                raise ConversionError(f"{index}: not a safetensors index ({e})") from e
            files = [self.dir / n for n in names]
            for f in files:
                if not f.is_file():
                    raise ConversionError(f"{f}: listed in {index.name} but missing")
            # shards the index does not list (e.g. a separate MTP file) are read too
            files += [f for f in sorted(self.dir.glob("*.safetensors")) if f not in files]
            return files
        files = sorted(self.dir.glob("*.safetensors"))
        if not files:
            raise ConversionError(f"{self.dir}: no *.safetensors weight files")
        return files

    def _open(self, f: Path):
        if f not in self._handles:
            from safetensors import safe_open
            try:
                self._handles[f] = safe_open(str(f), framework="pt")
            except Exception as e:  # safetensors raises its own error type for truncated/corrupt files
                raise ConversionError(f"{f}: unreadable safetensors file ({e})") from e
        return self._handles[f]

    # ------------------------------------------------------------------------------------- metadata

    def names(self) -> set[str]:
        return set(self._where)

    def file_of(self, name: str) -> Path:
        return self._where[name]

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._open(self._where[name]).get_slice(name).get_shape())

    def dtype(self, name: str) -> str:
        """safetensors dtype string: F32, BF16, F16, F8_E4M3, ..."""
        return self._open(self._where[name]).get_slice(name).get_dtype()

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
            t = self._open(f).get_tensor(name)
        except Exception as e:
            raise ConversionError(f"{f}: cannot read tensor {name} ({e})") from e
        if self.dtype(name) in FP8_DTYPES:
            t = self._dequant_fp8(name, t)
        return t.to(torch.float32).numpy()

    def _dequant_fp8(self, name: str, q):
        """w = q * scale over (block_rows x block_cols) blocks, before any cast (model.md, gguf.md)."""
        import torch
        scale_name = name + "_scale_inv"
        if scale_name not in self._where:
            raise ConversionError(f"{self._where[name]}: FP8 tensor {name} has no {scale_name}")
        scale = self._open(self._where[scale_name]).get_tensor(scale_name).to(torch.float32)
        br, bc = self.fp8_block
        rows, cols = q.shape
        if scale.shape != (-(-rows // br), -(-cols // bc)):
            raise ConversionError(f"{self._where[scale_name]}: {scale_name} has shape {tuple(scale.shape)}, "
                                  f"expected {(-(-rows // br), -(-cols // bc))} for {name} {tuple(q.shape)}")
        full = scale.repeat_interleave(br, 0).repeat_interleave(bc, 1)[:rows, :cols]
        return q.to(torch.float32) * full

    def source_dtype(self) -> str:
        """The dtype of the big weights: 'fp8', 'bf16', 'f16' or 'f32' (for --outtype auto)."""
        seen = {self.dtype(n) for n in self._where if n.endswith("_proj.weight")}
        for st, name in (("F8_E4M3", "fp8"), ("BF16", "bf16"), ("F16", "f16")):
            if st in seen:
                return name
        return "f32"
