"""The tree shows its architecture: csrc/ is grouped by stage and every include runs down the stages, and the
Python packages import without circles (TYPE_CHECKING imports included) and never back up from the top level
into the server; the code cites the reference pages in docs/, which a clone has."""
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


# --- Citations of the reference pages -------------------------------------------------------------------------------
# Code comments cite the model's math, the file format and the runtime's rules as `(docs/model.md, Indexer)`. Those
# pages live in docs/ (docs/architecture.md points to them); a citation of a page outside the repository (the spec
# the project started from) leaves a clone without the facts it names.
DOCS = ROOT / "docs"
CITING = [ROOT / name for name in ("convert", "csrc", "glm5next_runtime", "scripts", "tests", "README.md")]
CITING_SUFFIXES = {".py", ".pyi", ".h", ".cpp", ".sh", ".md"}
FACT_PAGES = ("model", "gguf", "runtime")
# A page name as a word of its own (not part of another file name): "model.md", "docs/gguf.md", "../x/runtime.md".
PAGE_NAME = re.compile(r"(?<![\w-])(?:model|gguf|runtime|field-reports)\.md(?![\w-])")
DOCS_PAGE = re.compile(r"(?<![\w./-])docs/([\w.-]+\.md)")
# "docs/X.md, SECTION": the section runs to the first ) ; or , (a quoted section may hold commas).
CITED_PAGE = re.compile(r"(?<![\w./-])docs/(" + "|".join(FACT_PAGES) + r")\.md,")
CITED_SECTION = re.compile(r'\s*("[^"]*"|[^),;]*)')
COMMENT_LEAD = re.compile(r"^\s*(?://+|#+|\*+)?\s*")


def _citing_files() -> list[Path]:
    files = []
    for place in CITING:
        found = [place] if place.is_file() else sorted(p for p in place.rglob("*") if p.is_file())
        files += [p for p in found if p.suffix in CITING_SUFFIXES and p.resolve() != Path(__file__).resolve()]
    return files


def _headings(page: str) -> list[str]:
    text = (DOCS / f"{page}.md").read_text()
    return [_norm(m) for m in re.findall(r"^#{1,6}\s+(.+?)\s*$", text, re.M)]


def _norm(text: str) -> str:
    return " ".join(text.strip().strip('"`').lower().split())


def _names_heading(cited: str, headings: list[str]) -> bool:
    """Whether a cited section names a heading: equal, or one a prefix of the other that ends at a word's end
    ("placement" for "Placement and devices", "Metrics: drafts, ..." for "Metrics"), case-insensitive."""
    cited = _norm(cited)
    for h in headings:
        short, long = sorted((cited, h), key=len)
        if long.startswith(short) and (len(long) == len(short) or not long[len(short)].isalnum()):
            return True
    return False


def _sections(lines: list[str]) -> list[tuple[int, str, str]]:
    """(line number, page, cited section) of every `docs/PAGE.md, SECTION` in `lines`; a section that a wrapped
    comment or docstring continues on the next line is read on there, comment markers left out."""
    found = []
    for i, line in enumerate(lines):
        for m in CITED_PAGE.finditer(line):
            rest = line[m.end():]
            if not re.search(r"[),;]", rest) and i + 1 < len(lines):
                rest += " " + COMMENT_LEAD.sub("", lines[i + 1], count=1)
            cited = " ".join(CITED_SECTION.match(rest)[1].split())
            if cited and not cited.startswith("docs/"):  # "(docs/model.md, docs/gguf.md)" cites two pages
                found.append((i + 1, m[1], cited))
    return found


def test_code_cites_docs_a_clone_has():
    """Every citation of the reference pages in convert/, csrc/, glm5next_runtime/, scripts/, tests/ and README.md
    names docs/PAGE.md (not the spec outside the repository, nor a bare `model.md`), every cited docs/*.md exists,
    and a cited section of docs/model.md, docs/gguf.md or docs/runtime.md is one of that page's headings."""
    headings = {page: _headings(page) for page in FACT_PAGES}
    outside, missing, sections = [], [], []
    for path in _citing_files():
        rel = path.relative_to(ROOT)
        try:
            lines = path.read_text(errors="replace").splitlines()
        except FileNotFoundError:  # moved away since the listing
            continue
        for n, line in enumerate(lines, 1):
            if "shared/spec" in line:
                outside.append(f"{rel}:{n}: {line.strip()}")
            for m in PAGE_NAME.finditer(line):
                before = line[:m.start()]
                if not before.endswith("docs/") or re.search(r"[\w./-]$", before[:-len("docs/")]):
                    outside.append(f"{rel}:{n}: {line.strip()}")
            for name in DOCS_PAGE.findall(line):
                if not (DOCS / name).is_file():
                    missing.append(f"{rel}:{n}: docs/{name}")
        for n, page, cited in _sections(lines):
            if not _names_heading(cited, headings[page]):
                sections.append(f"{rel}:{n}: docs/{page}.md has no section {cited!r}")
    problems = sorted(set(outside), key=lambda p: (p.split(":")[0], int(p.split(":")[1]))) + missing + sections
    assert not problems, "citations a clone cannot follow (write docs/PAGE.md, SECTION):\n" + "\n".join(problems)


def test_section_matching_reads_citations_as_written():
    headings = ["trunk", "trunk, one layer", "placement and devices", "metrics", "prompt cache on chats"]
    assert _names_heading('"Trunk, one layer"', headings)
    assert _names_heading("placement", headings)
    assert _names_heading("Metrics: drafts", headings)
    assert not _names_heading("place", headings)
    assert not _names_heading("Indexer", headings)
    lines = ["// sampling (docs/runtime.md,",
             '// draft-MTP round, step 3). More (docs/model.md, "Trunk, one layer", x)',
             "(docs/model.md, docs/gguf.md) (PyTorch, docs/model.md) (docs/gguf.md, Tensors; shapes)"]
    assert _sections(lines) == [(1, "runtime", "draft-MTP round"), (2, "model", '"Trunk, one layer"'),
                                (3, "gguf", "Tensors")]
    assert _sections(["(docs/model.md, NextN draft", "# head and index sharing): ..."]) == [
        (1, "model", "NextN draft head and index sharing")]


SERVER = ROOT / "glm5next_runtime" / "server"
# One package per API surface (glm5next_runtime/server/__init__.py); what they share sits directly under server/.
SURFACES = ("openai_chat", "native", "anthropic", "openai_responses", "vertex")
# Directly under server/ and no surface's: the command, its flags, and the app that mounts every surface.
ASSEMBLY = ("__init__", "__main__", "main", "args", "config", "app")


def _server_imports() -> dict[str, set[str]]:
    """glm5next_runtime.server's modules -> the server modules each imports."""
    package_dir = ROOT / "glm5next_runtime"
    modules = {_module_name(p, package_dir, "glm5next_runtime"): p for p in SERVER.rglob("*.py")}
    return {m: {d for d in _imports(p, m, set(modules)) if d.startswith("glm5next_runtime.server")}
            for m, p in modules.items()}


def _surface(module: str) -> str | None:
    """The API surface package `module` belongs to, or None for a module directly under server/."""
    parts = module.split(".")
    return parts[2] if len(parts) > 3 or (len(parts) == 3 and parts[2] in SURFACES) else None


def test_every_api_surface_is_a_package():
    missing = [s for s in SURFACES if not (SERVER / s / "__init__.py").is_file()]
    assert not missing, missing


def test_no_api_surface_imports_another():
    crossing = [f"{m} imports {d}" for m, deps in _server_imports().items() if (s := _surface(m))
                for d in deps if _surface(d) not in (None, s)]
    assert not crossing, crossing


def test_the_modules_the_surfaces_share_import_no_surface():
    """The pipeline and what it is made of serve every surface alike: none of them reaches into a surface (only
    the app that mounts them does)."""
    upward = [f"{m} imports {d}" for m, deps in _server_imports().items()
              if _surface(m) is None and m.split(".")[-1] not in ASSEMBLY for d in deps if _surface(d)]
    assert not upward, upward


def test_no_module_directly_under_server_belongs_to_one_surface():
    """A module directly under server/ that only one surface uses (or that is named for one) belongs in that
    surface's package."""
    imports = _server_imports()
    owned = []
    for m in imports:
        name = m.split(".")[-1]
        if _surface(m) is not None or name in ASSEMBLY:
            continue
        users = {_surface(u) for u, deps in imports.items() if m in deps}
        if name.startswith(SURFACES) or (len(users) == 1 and None not in users):
            owned.append(f"{m} (used by {sorted(map(str, users))})")
    assert not owned, owned


# tests/ mirrors the code: one folder per package or stage; this file, about the whole tree, and the shared fixtures
# (conftest.py, live_server.py, rpc_servers.py, convert_checks.py, reference/) stay on top.
TEST_FOLDERS = {"convert": ROOT / "convert", "csrc": ROOT / "csrc", "runtime": ROOT / "glm5next_runtime",
                "server": SERVER, "bench": ROOT / "glm5next_runtime" / "bench", "scripts": ROOT / "scripts"}


def test_tests_sit_in_the_folder_of_what_they_test():
    tests = ROOT / "tests"
    assert all(code.is_dir() for code in TEST_FOLDERS.values()), TEST_FOLDERS
    misplaced = [str(p.relative_to(tests)) for p in tests.rglob("test_*.py")
                 if p != Path(__file__).resolve() and p.relative_to(tests).parts[0] not in TEST_FOLDERS]
    assert not misplaced, f"test files outside {sorted(TEST_FOLDERS)}: {misplaced}"
