"""The tree shows its architecture: csrc/ is grouped by stage and every include runs down the stages, and the
Python packages import without circles (TYPE_CHECKING imports included) and never back up from the top level
into the server."""
import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CSRC = ROOT / "csrc"
# Each stage may include its own headers and those of the stages before it.
STAGES = {"model": 0, "graph": 1, "runtime": 2, "python": 3, "testing": 3}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def _cpp_files() -> list[Path]:
    return sorted(p for p in CSRC.rglob("*") if p.suffix in (".h", ".cpp"))


def _project_includes(path: Path) -> list[str]:
    """The project headers `path` includes, as paths relative to csrc/ (ggml's own headers left out)."""
    return [inc for inc in INCLUDE.findall(path.read_text()) if (CSRC / inc).is_file()]


def test_every_source_file_sits_in_a_stage_folder():
    misplaced = [str(p.relative_to(CSRC)) for p in _cpp_files() if p.relative_to(CSRC).parts[0] not in STAGES]
    assert not misplaced, f"csrc/ files outside the stage folders {sorted(STAGES)}: {misplaced}"


def test_includes_never_run_up_the_stages():
    upward = []
    for path in _cpp_files():
        stage = path.relative_to(CSRC).parts[0]
        for inc in _project_includes(path):
            if STAGES[Path(inc).parts[0]] > STAGES[stage]:
                upward.append(f"{path.relative_to(CSRC)} includes {inc}")
    assert not upward, upward


def test_includes_name_files_by_their_stage_path():
    """`#include "engine.h"` would compile only by accident of the include path: every project include is spelled
    from csrc/ ("runtime/engine.h"), so the stage of each dependency is visible where it is used."""
    bare = [f"{p.relative_to(CSRC)}: {inc}" for p in _cpp_files() for inc in INCLUDE.findall(p.read_text())
            if "/" not in inc and not (CSRC / inc).exists() and inc.endswith(".h") and not inc.startswith(("ggml", "gguf"))]
    assert not bare, bare


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` (node -> successors) as a list of nodes, or None."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_include_cycles():
    graph = {str(p.relative_to(CSRC)): set(_project_includes(p)) for p in _cpp_files()}
    assert _cycle(graph) is None


def _module_name(path: Path, package_dir: Path, package: str) -> str:
    parts = list(path.relative_to(package_dir).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([package, *parts])


def _imports(path: Path, module: str, known: set[str]) -> set[str]:
    """The project modules `module` (source `path`) imports anywhere in its body, TYPE_CHECKING blocks and
    function bodies included. `from P import x` counts as importing P.x when that is a module, else P; a package
    that contains `module` is never counted (it is already being imported when its modules run)."""
    is_package = path.name == "__init__.py"
    base = module.split(".") if is_package else module.split(".")[:-1]

    def resolve(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name if name and name != module and not module.startswith(name + ".") else None

    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [resolve(a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            prefix = base[:len(base) - node.level + 1] if node.level else []
            source = ".".join(prefix + ([node.module] if node.module else []))
            targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in known else resolve(source) for a in node.names]
        else:
            continue
        found.update(t for t in targets if t and t != module)
    return found


@pytest.mark.parametrize("package,folder", [("glm5next_runtime", "glm5next_runtime"), ("glm5next_convert", "convert")])
def test_python_imports_have_no_cycles(package, folder):
    package_dir = ROOT / folder
    modules = {_module_name(p, package_dir, package): p for p in package_dir.rglob("*.py")}
    graph = {m: _imports(p, m, set(modules)) for m, p in modules.items()}
    assert _cycle(graph) is None


def test_top_level_never_imports_the_server():
    package_dir = ROOT / "glm5next_runtime"
    modules = {_module_name(p, package_dir, "glm5next_runtime"): p for p in package_dir.rglob("*.py")}
    upward = [f"{m} imports {dep}" for m, p in modules.items() if not m.startswith("glm5next_runtime.server")
              for dep in _imports(p, m, set(modules)) if dep.startswith("glm5next_runtime.server")]
    assert not upward, upward
