"""Smoke tests for the native extension: ggml runs, errors are Python
exceptions, and ggml is shared with llama_cpp rather than loaded twice."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from glm5next_runtime import _core, _testing


# Odd sizes on purpose: not multiples of ggml's 32-element blocks or SIMD widths.
@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (3, 5, 7), (33, 65, 17), (64, 128, 96), (257, 31, 129)])
def test_matmul_matches_numpy(m, k, n):
    rng = np.random.default_rng(m * 10007 + k * 101 + n)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    got = _testing.matmul(a, b)
    assert got.dtype == np.float32 and got.shape == (m, n)
    # f32 accumulation over k terms of N(0,1) products; compare with a float64
    # reference. Observed max error here is < 1e-5; 1e-4 leaves room for other
    # CPU kernels (ggml picks SIMD paths per machine).
    np.testing.assert_allclose(got, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-4)


def test_matmul_accepts_non_contiguous_input():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((6, 4), dtype=np.float32)
    b = rng.standard_normal((5, 4), dtype=np.float32).T  # Fortran-ordered view
    np.testing.assert_allclose(_testing.matmul(a, b), a @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "a_shape,b_shape",
    [((2, 3), (4, 5)), ((3,), (3, 2)), ((2, 3), (3,)), ((2, 2, 2), (2, 2)), ((0, 3), (3, 2))],
)
def test_matmul_bad_shapes_raise_value_error(a_shape, b_shape):
    with pytest.raises(ValueError):
        _testing.matmul(np.ones(a_shape, np.float32), np.ones(b_shape, np.float32))


def test_matmul_rejects_float64():
    with pytest.raises(TypeError):
        _testing.matmul(np.ones((2, 2)), np.ones((2, 2)))


def test_info_functions():
    assert _core.ggml_version()[0].isdigit()
    assert isinstance(_core.ggml_commit(), str)
    assert isinstance(_core.system_info(), str)


def test_single_ggml_shared_with_llama_cpp(tmp_path):
    # In a subprocess: this process has imported things in pytest's order. Run
    # it outside the checkout so `python -c` cannot import the bare source tree.
    code = """
import json, os
import numpy as np
import llama_cpp
from glm5next_runtime import _core, _testing
_testing.matmul(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32))
mapped = {line.split()[-1] for line in open("/proc/self/maps")
          if os.path.basename(line.split()[-1]).startswith("libggml-base")}
print(json.dumps({"mapped": sorted(mapped), "llama_lib": os.path.join(os.path.dirname(llama_cpp.__file__), "lib")}))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert len(info["mapped"]) == 1, info["mapped"]
    # The kernel reports resolved paths: the one libggml-base is llama_cpp's own.
    assert os.path.dirname(info["mapped"][0]) == os.path.realpath(info["llama_lib"])


@pytest.mark.parametrize("n_embd,hc,n_tokens", [(1, 1, 1), (7, 4, 3), (192, 4, 17), (33, 2, 5)])
def test_hc_post_matches_ggml_bit_for_bit_and_numpy(n_embd, hc, n_tokens):
    """Our mHC post-mix kernel (the trunk graph's) equals ggml's DSV4_HC_POST bit for bit, summing as ggml's build
    does (its products fused into the sums where ggml was built for FMA: graph/mhc_ops.h, hc_mix_kernels_available;
    a tolerance let a rounded form pass here while placed layers parted from the CPU by 3e-4), and the formula of
    docs/model.md ("Trunk, one layer", step 3)."""
    rng = np.random.default_rng(n_embd * 131 + hc * 7 + n_tokens)
    x = rng.standard_normal((n_tokens, n_embd), dtype=np.float32)
    residual = rng.standard_normal((n_tokens, hc, n_embd), dtype=np.float32)
    post = rng.standard_normal((n_tokens, hc), dtype=np.float32)
    comb = rng.standard_normal((n_tokens, hc, hc), dtype=np.float32)
    ours = _testing.hc_post(x, residual, post, comb)
    theirs = _testing.hc_post(x, residual, post, comb, ggml_kernel=True)
    want = x[:, None, :] * post[:, :, None] + np.einsum("tse,tsd->tde", residual.astype(np.float64), comb)
    assert ours.shape == (n_tokens, hc, n_embd)
    np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_allclose(ours, want, rtol=1e-5, atol=1e-5)


def test_hc_post_rejects_bad_shapes():
    with pytest.raises(ValueError, match="hc_post: shapes"):
        _testing.hc_post(np.zeros((2, 8), np.float32), np.zeros((2, 4, 8), np.float32), np.zeros((2, 3), np.float32),
                      np.zeros((2, 4, 4), np.float32))
