"""Placement (llama-server's -ngl / --cpu-moe / --n-cpu-moe / -ot) with a fake device list; no GPU needed."""
from __future__ import annotations

import re

import pytest

from glm5next_runtime import Model
from glm5next_runtime.placement import describe_placement, plan_placement

DEVICES = ["CPU", "CUDA0"]
N_TRUNK, N_ALL = 4, 5
PER_LAYER = ["attn_norm.weight", "attn_q_a.weight", "ffn_gate_inp.weight", "ffn_up_exps.weight",
             "ffn_down_exps.weight", "ffn_gate_exps.weight", "ffn_up_shexp.weight"]
NAMES = (["token_embd.weight"] + [f"blk.{il}.{n}" for il in range(N_ALL) for n in PER_LAYER]
         + ["blk.4.nextn.eh_proj.weight", "output_norm.weight", "output.weight"])


def plan(**kw):
    return plan_placement(NAMES, N_ALL, N_TRUNK, kw.pop("devices", DEVICES), **kw)


def layer_devices(p, il):
    return {p[f"blk.{il}.{n}"] for n in PER_LAYER}


def test_default_and_cpu_only_keep_everything_on_cpu():
    assert set(plan().values()) == {"CPU"}
    everything = dict(n_gpu_layers=99, override_tensor=["exps=CPU"], draft_device="CPU")
    assert set(plan(devices=["CPU"], **everything).values()) == {"CPU"}


@pytest.mark.parametrize("ngl,gpu_layers,output_on_gpu", [
    (0, [], False),
    (1, [], True),            # llama.cpp counts the output layer as the last of n_trunk + 1
    (2, [3], True),
    (4, [1, 2, 3], True),
    (5, [0, 1, 2, 3], True),  # n_trunk + 1: everything
    (99, [0, 1, 2, 3], True),
])
def test_ngl_offloads_the_last_layers(ngl, gpu_layers, output_on_gpu):
    p = plan(n_gpu_layers=ngl)
    for il in range(N_TRUNK):
        assert layer_devices(p, il) == {"CUDA0" if il in gpu_layers else "CPU"}, il
    assert p["output.weight"] == p["output_norm.weight"] == ("CUDA0" if output_on_gpu else "CPU")
    assert p["token_embd.weight"] == "CPU"
    # the NextN layer follows the last trunk layer
    assert layer_devices(p, 4) | {p["blk.4.nextn.eh_proj.weight"]} == layer_devices(p, 3)


def test_draft_device_places_the_nextn_layer():
    p = plan(n_gpu_layers=99, draft_device="CPU")
    assert layer_devices(p, 4) == {"CPU"} and layer_devices(p, 3) == {"CUDA0"}
    p = plan(draft_device="CUDA0")
    assert layer_devices(p, 4) == {"CUDA0"} and layer_devices(p, 3) == {"CPU"}


def test_cpu_moe_keeps_routed_experts_on_cpu():
    p = plan(n_gpu_layers=99, cpu_moe=True)
    for il in range(N_ALL):
        for n in PER_LAYER:
            assert p[f"blk.{il}.{n}"] == ("CPU" if "_exps" in n else "CUDA0"), (il, n)


def test_n_cpu_moe_keeps_the_first_layers_experts_on_cpu():
    p = plan(n_gpu_layers=99, n_cpu_moe=2)
    for il in range(N_ALL):
        assert p[f"blk.{il}.ffn_up_exps.weight"] == ("CPU" if il < 2 else "CUDA0")
        assert p[f"blk.{il}.ffn_up_shexp.weight"] == "CUDA0"  # shared experts are not "exps"


def test_override_tensor_first_match_wins_and_beats_cpu_moe():
    p = plan(override_tensor=[r"blk\.1\.ffn_up_exps=CUDA0,blk\.1\.=CPU", r"attn_q_a=CUDA0"], cpu_moe=True)
    assert p["blk.1.ffn_up_exps.weight"] == "CUDA0" and p["blk.1.ffn_down_exps.weight"] == "CPU"
    assert p["blk.1.attn_q_a.weight"] == "CPU"  # the blk.1 rule came first
    assert p["blk.2.attn_q_a.weight"] == "CUDA0" and p["blk.2.ffn_up_exps.weight"] == "CPU"


@pytest.mark.parametrize("kw,message", [
    (dict(override_tensor=["exps"]), "'exps': expected REGEX=DEVICE"),
    (dict(override_tensor=["exps=CUDA1"]), "unknown device 'CUDA1'"),
    (dict(override_tensor=["(exps=CPU"]), "bad regex '(exps'"),
    (dict(draft_device="Vulkan0"), "draft device 'Vulkan0'"),
    (dict(n_gpu_layers=-1), "n_gpu_layers = -1"),
    (dict(n_cpu_moe=-2), "n_cpu_moe = -2"),
    (dict(devices=["CUDA0"]), "the CPU device is missing"),
])
def test_bad_arguments_name_the_culprit(kw, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        plan(**kw)


def test_model_plan_on_this_machine(checkpoints):
    path = checkpoints.convert(checkpoints.make("load-tiny", dtype="f32"), outtype="f32")
    m = Model(path, n_gpu_layers=99, cpu_moe=True, override_tensor=["output=CPU"])
    p = m.placement()
    assert set(p) == {t.name for t in m.tensors()}
    assert "CPU" in describe_placement(p)
    with pytest.raises(ValueError, match="unknown device 'NoSuchDevice0'"):
        Model(path, override_tensor=["exps=NoSuchDevice0"])


TWO = ["CPU", "CUDA0", "CUDA1"]


def trunk_devices(p):
    return [p[f"blk.{il}.attn_norm.weight"] for il in range(N_TRUNK)] + [p["output.weight"]]


@pytest.mark.parametrize("kw,want", [
    # llama.cpp's load_tensors: offloaded entry j of n goes to the first device whose cumulative share > j / n
    (dict(n_gpu_layers=99), ["CUDA0", "CUDA0", "CUDA0", "CUDA1", "CUDA1"]),
    (dict(n_gpu_layers=99, tensor_split=[1, 1]), ["CUDA0", "CUDA0", "CUDA0", "CUDA1", "CUDA1"]),
    (dict(n_gpu_layers=99, tensor_split=[1, 4]), ["CUDA0", "CUDA1", "CUDA1", "CUDA1", "CUDA1"]),
    (dict(n_gpu_layers=99, tensor_split=[0, 1]), ["CUDA1"] * 5),
    (dict(n_gpu_layers=99, tensor_split=[3]), ["CUDA0"] * 5),  # missing proportions are 0
    (dict(n_gpu_layers=2, tensor_split=[1, 1]), ["CPU", "CPU", "CPU", "CUDA0", "CUDA1"]),
    (dict(n_gpu_layers=99, split_mode="none"), ["CUDA0"] * 5),
    (dict(n_gpu_layers=99, split_mode="none", main_gpu=1), ["CUDA1"] * 5),
])
def test_layers_split_over_devices_as_llama_cpp_does(kw, want):
    assert trunk_devices(plan(devices=TWO, **kw)) == want


def test_draft_layer_follows_the_last_trunk_layer_unless_given_a_device():
    assert plan(devices=TWO, n_gpu_layers=99)["blk.4.nextn.eh_proj.weight"] == "CUDA1"
    assert plan(devices=TWO, n_gpu_layers=99, draft_device="CPU")["blk.4.nextn.eh_proj.weight"] == "CPU"
    assert plan(devices=TWO, draft_device="CUDA0")["blk.4.nextn.eh_proj.weight"] == "CUDA0"


@pytest.mark.parametrize("kw,message", [
    (dict(split_mode="row"), "split_mode 'row'"),
    (dict(main_gpu=2, split_mode="none"), "main_gpu = 2"),
    (dict(tensor_split=[1, 1, 1]), "tensor_split [1, 1, 1]"),
    (dict(tensor_split=[0, 0]), "tensor_split [0, 0]"),
    (dict(tensor_split=[-1, 2]), "tensor_split [-1, 2]"),
])
def test_bad_split_arguments_name_the_culprit(kw, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        plan(devices=TWO, n_gpu_layers=99, **kw)
