"""glm5next_runtime/_core.pyi is what pybind11-stubgen makes of the built module today (scripts/gen_stubs.sh), so
editors show the native module's real signatures and docstrings."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_core_stub_matches_the_built_module(tmp_path):
    stubgen = Path(sys.executable).with_name("pybind11-stubgen")
    subprocess.run([str(stubgen), "glm5next_runtime._core", "-o", str(tmp_path)], check=True, capture_output=True)
    fresh = (tmp_path / "glm5next_runtime" / "_core.pyi").read_text()
    committed = (ROOT / "glm5next_runtime" / "_core.pyi").read_text()
    assert committed == fresh, "glm5next_runtime/_core.pyi is stale: run scripts/gen_stubs.sh"

