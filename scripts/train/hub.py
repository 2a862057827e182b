"""Read and write the training model as a hub-layout checkpoint (make_checkpoint.py's writer: config.json with
text_config, generation_config.json, tokenizer and chat template, safetensors, a tiny vision tower)."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from safetensors.torch import load_file

from make_checkpoint import CheckpointSpec, vision_weights, write_checkpoint

from .model import Glm5NextTrain


def read_text_config(ckpt_dir: str | Path) -> dict:
    """config.json's text_config, or its top level for a flat (text-only) config."""
    cfg = json.loads((Path(ckpt_dir) / "config.json").read_text())
    return cfg.get("text_config", cfg)


def load(ckpt_dir: str | Path) -> Glm5NextTrain:
    """A Glm5NextTrain (float32) holding every text tensor of a checkpoint (f32 or bf16 safetensors, the NextN
    layer included). Raises KeyError/RuntimeError when names or shapes do not fit."""
    ckpt_dir = Path(ckpt_dir)
    model = Glm5NextTrain(read_text_config(ckpt_dir))
    tensors = {}
    for f in sorted(ckpt_dir.glob("*.safetensors")):
        tensors |= {k: v.float() for k, v in load_file(str(f)).items() if not k.startswith("model.visual.")}
    model.load_state_dict(tensors, strict=True)
    return model


def save(model: Glm5NextTrain, out_dir: str | Path, spec: CheckpointSpec, tokenizer, notes: dict | None = None) -> Path:
    """Write `model` as the checkpoint `spec` describes (spec.dtype, e.g. bf16; spec's text_config must be the
    model's) with `tokenizer` (make_checkpoint.train_tokenizer's) and `notes` as training.json. It is written
    next to `out_dir` and renamed into place, so `out_dir` never holds half a checkpoint. Returns `out_dir`."""
    out = Path(out_dir)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tensors = {k: v.detach().float().clone() for k, v in model.state_dict().items()}
    write_checkpoint(tmp, spec, tensors | vision_weights(spec), tokenizer)
    if notes is not None:
        (tmp / "training.json").write_text(json.dumps(notes, indent=2))
    old = out.with_name(f".{out.name}.old-{os.getpid()}")
    if out.exists():
        out.rename(old)
    tmp.rename(out)
    shutil.rmtree(old, ignore_errors=True)
    return out
