"""The converter streams: a few tensors, or experts of a stacked expert tensor, in memory at a time, so a 300+ GB
checkpoint converts in the memory of about one layer's experts. Measured as the growth of anonymous resident memory
(RssAnon), and of the whole resident set: each tensor is read through a mapping of its own, unmapped once read, so
the pages of the safetensors files read (RssFile) do not pile up either (issue 50)."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

PROBE = textwrap.dedent("""
    import sys, threading, time
    import gguf, numpy, safetensors, torch
    from glm5next_convert import convert

    def kib(kinds):
        return sum(int(line.split()[1]) for line in open("/proc/self/status") if line.split(":")[0] in kinds)
    kinds = sys.argv[4].split(",")

    base, peak, done = kib(kinds), [0], []
    def sample():
        while not done:
            peak[0] = max(peak[0], kib(kinds))
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
    r = subprocess.run([sys.executable, "-c", PROBE, str(ckpt), str(out), outtype, "RssAnon"], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    growth = int(r.stdout.split()[-1])
    # one MoE layer's routed experts as float32: 256 experts x 3 matrices x 256 x 256
    layer_f32 = 256 * 3 * 256 * 256 * 4
    assert growth < layer_f32 / 8, f"anonymous memory grew by {growth / 2**20:.1f} MiB"
    assert out.stat().st_size > 4 * layer_f32 / (2 if outtype == "f32" else 8)  # it did write the experts


@pytest.mark.slow
def test_the_whole_resident_set_stays_far_below_the_checkpoint(checkpoints):
    """A checkpoint of 4 shards (~780 MiB f32): the resident set, file pages included, grows by far less than the bytes
    read (the shards' pages used to stay mapped to the end: 4.4 GiB for a 3.8 GB checkpoint)."""
    ckpt = checkpoints.make("many-experts-shards", "many-experts", dtype="f32", shards=4)
    size = sum(f.stat().st_size for f in ckpt.glob("*.safetensors"))
    out = ckpt.parent / "many-experts-shards-q8_0.gguf"
    r = subprocess.run([sys.executable, "-c", PROBE, str(ckpt), str(out), "q8_0", "RssAnon,RssFile"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    growth = int(r.stdout.split()[-1])
    assert len(list(ckpt.glob("*.safetensors"))) == 4 and size > 500 * 2**20
    assert growth < size / 4, f"the resident set grew by {growth / 2**20:.1f} MiB reading {size / 2**20:.0f} MiB"
