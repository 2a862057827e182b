"""The converter streams: one tensor, or one expert of a stacked expert tensor, in memory at a time, so a
300+ GB checkpoint converts in the memory of about one layer's experts. Measured as the growth of anonymous
resident memory (RssAnon); the safetensors files are memory-mapped, and their pages (RssFile) are the
kernel's page cache, not a copy."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

PROBE = textwrap.dedent("""
    import sys, threading, time
    import gguf, numpy, safetensors, torch
    from glm5next_convert import convert

    def anon_kib():
        for line in open("/proc/self/status"):
            if line.startswith("RssAnon"):
                return int(line.split()[1])

    base, peak, done = anon_kib(), [0], []
    def sample():
        while not done:
            peak[0] = max(peak[0], anon_kib())
            time.sleep(0.002)
    t = threading.Thread(target=sample)
    t.start()
    convert(sys.argv[1], sys.argv[2], outtype=sys.argv[3], progress=False, log=lambda m: None)
    done.append(1)
    t.join()
    print((peak[0] - base) * 1024)
""")


@pytest.mark.slow
@pytest.mark.parametrize("outtype", ["f32", "q8_0"])
def test_peak_memory_is_far_below_one_layer_of_experts(checkpoints, outtype):
    ckpt = checkpoints.make("many-experts", "many-experts")
    out = ckpt.parent / f"many-experts-{outtype}.gguf"
    r = subprocess.run([sys.executable, "-c", PROBE, str(ckpt), str(out), outtype], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    growth = int(r.stdout.split()[-1])
    # one MoE layer's routed experts as float32: 256 experts x 3 matrices x 256 x 256
    layer_f32 = 256 * 3 * 256 * 256 * 4
    assert growth < layer_f32 / 8, f"anonymous memory grew by {growth / 2**20:.1f} MiB"
    assert out.stat().st_size > 4 * layer_f32 / (2 if outtype == "f32" else 8)  # it did write the experts
