"""Bad input: a clear error naming the file, tensor or key, exit code != 0, and no file left behind (an
existing output is left untouched)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from safetensors.torch import load_file, save_file

from glm5next_convert import ConversionError, convert
from convert_checks import OLD_OUTPUT, fresh_copy
from test_convert_roundtrip import meta


@pytest.fixture
def broken(checkpoints, tmp_path):
    """A fresh copy of the tiny checkpoint to damage, and an output path that already holds a file."""
    return fresh_copy(checkpoints.make("bad-base", dtype="f32"), tmp_path)


def run_cli(ckpt, out) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "glm5next_convert.cli", str(ckpt), "--outfile", str(out),
                           "--outtype", "f32", "--no-progress"], capture_output=True, text=True)


def assert_fails(ckpt, out, *needles):
    r = run_cli(ckpt, out)
    assert r.returncode != 0
    assert "Traceback" not in r.stderr, r.stderr
    for n in needles:
        assert n in r.stderr, (n, r.stderr)
    assert out.read_bytes() == OLD_OUTPUT
    assert list(out.parent.iterdir()) == [out], "a temporary file was left behind"


def rewrite_weights(ckpt, edit):
    f = ckpt / "model.safetensors"
    tensors = load_file(str(f))
    edit(tensors)
    save_file(tensors, str(f), metadata={"format": "pt"})


def test_missing_config(broken):
    ckpt, out = broken
    (ckpt / "config.json").unlink()
    assert_fails(ckpt, out, "config.json", "missing")


def test_config_not_json(broken):
    ckpt, out = broken
    (ckpt / "config.json").write_text("{ not json")
    assert_fails(ckpt, out, "config.json", "not valid JSON")


def test_missing_weights(broken):
    ckpt, out = broken
    (ckpt / "model.safetensors").unlink()
    assert_fails(ckpt, out, "no *.safetensors")


def test_unknown_model_type(broken):
    ckpt, out = broken
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["model_type"] = "llama"
    (ckpt / "config.json").write_text(json.dumps(cfg))
    assert_fails(ckpt, out, "model_type 'llama'")


def test_wrong_shape(broken):
    ckpt, out = broken
    name = "model.language_model.layers.1.self_attn.q_a_proj.weight"
    rewrite_weights(ckpt, lambda t: t.__setitem__(name, t[name].T.contiguous()))
    assert_fails(ckpt, out, "model.safetensors", name, "[64, 32]", "expected [32, 64]")


def test_missing_tensor(broken):
    ckpt, out = broken
    name = "model.language_model.layers.2.self_attn.A_log"
    rewrite_weights(ckpt, lambda t: t.pop(name))
    assert_fails(ckpt, out, name, "missing")


def test_truncated_safetensors(broken):
    ckpt, out = broken
    f = ckpt / "model.safetensors"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    assert_fails(ckpt, out, "model.safetensors", "unreadable")


def test_failure_while_writing_leaves_nothing(broken, monkeypatch):
    """An error in the middle of the tensor data: the temp file goes, the old output stays."""
    from glm5next_convert.checkpoint import Checkpoint

    ckpt, out = broken
    real_read, calls = Checkpoint.read, []

    def failing_read(self, name):
        calls.append(name)
        if len(calls) == 40:
            raise ConversionError(f"simulated read failure at {name}")
        return real_read(self, name)

    monkeypatch.setattr(Checkpoint, "read", failing_read)
    with pytest.raises(ConversionError, match="simulated"):
        convert(ckpt, out, outtype="f32", progress=False, log=lambda m: None)
    assert out.read_bytes() == OLD_OUTPUT
    assert list(out.parent.iterdir()) == [out]


def test_claimed_nextn_layer_without_weights(broken):
    """Writes nextn_predict_layers = what was found (none) and says so; the trunk still converts."""
    ckpt, out = broken
    rewrite_weights(ckpt, lambda t: [t.pop(k) for k in [k for k in t if ".layers.4." in k]])
    assert json.loads((ckpt / "config.json").read_text())["text_config"]["num_nextn_predict_layers"] == 1
    r = run_cli(ckpt, out)
    assert r.returncode == 0, r.stderr
    assert "claims num_nextn_predict_layers = 1" in r.stderr and "writing nextn_predict_layers = 0" in r.stderr
    m = meta(out)
    assert "glm5next.nextn_predict_layers" not in m and m["glm5next.block_count"] == 4


def test_mtp_only_without_nextn_layer(checkpoints, tmp_path):
    ckpt = checkpoints.make("bad-no-nextn", nextn=False)
    out = tmp_path / "draft.gguf"
    with pytest.raises(ConversionError, match="--mtp-only needs the NextN layer"):
        convert(ckpt, out, layout="mtp-only", progress=False, log=lambda m: None)
    assert not list(tmp_path.iterdir())
