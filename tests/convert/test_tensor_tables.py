"""The converter's tensor and type tables agree with the loader's (one fact, two implementations: convert/tensors.py
and convert/qtypes.py in Python, csrc/model/tensors.cpp and csrc/model/draft_weights.cpp in C++)."""
import pytest
from gguf import GGMLQuantizationType as QT

from glm5next_convert.checkpoint import Checkpoint
from glm5next_convert.hparams import read_hparams
from glm5next_convert.qtypes import choose_type
from glm5next_convert.tensors import build_plan, count_nextn, text_prefix
from glm5next_runtime import _core

PRESETS = ["tiny", "shared", "kpool8", "notail", "groups", "dense-sparse"]


def _plan(ckpt_dir, layout="combined"):
    ckpt = Checkpoint(ckpt_dir)
    hp = read_hparams(ckpt.config)
    n_nextn = 0 if layout == "no-mtp" else count_nextn(ckpt, hp, text_prefix(ckpt))
    return build_plan(ckpt, hp, n_nextn, trunk=layout != "mtp-only")


def _ggml_shape(numpy_shape) -> list[int]:
    ne = list(reversed(numpy_shape))
    while len(ne) > 1 and ne[-1] == 1:
        ne.pop()
    return ne


@pytest.mark.parametrize("layout", ["combined", "no-mtp", "mtp-only"])
@pytest.mark.parametrize("preset", PRESETS)
def test_converter_writes_exactly_the_tensors_the_loader_reads(checkpoints, preset, layout):
    """Every tensor the converter plans is one the loader looks for, with the loader's shape; every tensor the
    loader requires is planned; nothing is written that the loader would ignore."""
    ckpt = checkpoints.make(f"table-{preset}", preset)
    path = checkpoints.convert(ckpt, tag=f"-{layout}", outtype="f32", layout=layout)
    table = {name: (ne, required) for name, ne, required in _core.Model(str(path), []).tensor_table()}
    planned = {t.name: _ggml_shape(t.shape) for t in _plan(ckpt, layout)}

    assert set(planned) - set(table) == set(), "planned tensors the loader never reads"
    missing = {name for name, (_, required) in table.items() if required and name not in planned}
    assert missing == set(), "tensors the loader requires that the converter does not write"
    assert {name: shape for name, shape in planned.items() if shape != table[name][0]} == {}


def test_the_table_check_sees_a_stray_tensor(checkpoints):
    """The comparison above can fail: a name the loader does not read is reported."""
    ckpt = checkpoints.make("table-tiny", "tiny")
    path = checkpoints.convert(ckpt, tag="-combined", outtype="f32", layout="combined")
    table = {name for name, _, _ in _core.Model(str(path), []).tensor_table()}
    planned = {t.name for t in _plan(ckpt)} | {"blk.0.stray.weight"}
    assert planned - table == {"blk.0.stray.weight"}


@pytest.mark.parametrize("draft_type,base", [("q8_0", QT.Q8_0), ("q4_0", QT.Q4_0)])
def test_draft_requantization_follows_the_converters_type_rules(checkpoints, draft_type, base):
    """--spec-draft-type requantizes the draft layer at load to the type the converter's --mtp-type would have
    written: the same tensors quantized (attn_q_a, attn_q_b and eh_proj never below q8_0), the same ones kept."""
    ckpt = checkpoints.make("table-tiny", "tiny")
    path = checkpoints.convert(ckpt, tag="-combined", outtype="f32", layout="combined")
    model = _core.Model(str(path), [])
    engine = _core.Engine(model, 16, 1, draft_type)
    requantized = engine.draft_requantized
    nextn = [t for t in _plan(ckpt) if t.nextn]
    assert nextn, "the checkpoint has a NextN layer"
    want = {}
    for t in nextn:
        qtype = choose_type(t.name, t.shape, base)
        if qtype in (QT.Q8_0, QT.Q4_0):
            want[t.name] = qtype.name.lower()
    assert requantized == want
