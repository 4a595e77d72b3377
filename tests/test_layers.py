"""The package's layers import one way (design.md §8): core, semantics, frontend, backends,
runtime, tools, then the CLI and the public shims at the top. Every import of an xlgen
module, at module level or inside a function, goes to the same layer or a lower one.
Inside xlgen/tools/ the groups do the same (TOOL_GROUPS), and no tool knows a pipeline:
what one pipeline needs lives in its companion, beside it."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "xlgen"
LAYERS = ["core", "semantics", "frontend", "backends", "runtime", "tools"]
TOP = len(LAYERS)  # xlgen/cli/, __main__.py and the public shims (build.py, testing.py, companion.py)


def _module(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer(module: str) -> int:
    parts = module.split(".")
    if module == "xlgen":  # the package's __init__: only __version__
        return -1
    if len(parts) >= 2 and parts[1] in LAYERS:
        return LAYERS.index(parts[1])
    return TOP


def _imports(path: Path):
    module = _module(path)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            elif node.module and node.module.split(".")[0] == "xlgen":
                base = node.module
            else:
                continue
            for alias in node.names:
                full = f"{base}.{alias.name}"
                yield node.lineno, full if (PACKAGE.parent / (full.replace(".", "/") + ".py")).exists() or \
                    (PACKAGE.parent / full.replace(".", "/")).is_dir() else base
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "xlgen":
                    yield node.lineno, alias.name


def test_imports_go_down_the_layers():
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "data" in path.relative_to(PACKAGE).parts:
            continue
        mine = _layer(_module(path))
        for line, target in _imports(path):
            if _layer(target) > mine:
                wrong.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {LAYERS[mine] if mine < TOP else 'top'} "
                             f"imports {target} ({LAYERS[_layer(target)] if _layer(target) < TOP else 'top'})")
    assert not wrong, "imports up the layers:\n" + "\n".join(wrong)


# xlgen/tools/ by purpose, lowest first: a module imports its own group and those before it.
# progress and doctor are leaves every group may use; they import no tool.
TOOL_LEAVES = ["progress", "doctor"]
TOOL_GROUPS = ["pipeline", "check", "measure", "demo"]


def _tool_rank(module: str) -> int | None:
    """The group of a module of xlgen.tools (0: a leaf, 1..: TOOL_GROUPS; -1: the package
    itself); None outside xlgen.tools."""
    parts = module.split(".")
    if parts[:2] != ["xlgen", "tools"]:
        return None
    if len(parts) == 2:
        return -1
    if parts[2] in TOOL_LEAVES:
        return 0
    assert parts[2] in TOOL_GROUPS, f"{module}: in no group of TOOL_GROUPS (add it, or put it in a group)"
    return 1 + TOOL_GROUPS.index(parts[2])


def _tool_group(rank: int) -> str:
    return {-1: "xlgen.tools", 0: "a leaf"}.get(rank) or TOOL_GROUPS[rank - 1]


def test_tool_groups_import_down():
    wrong = []
    for path in sorted((PACKAGE / "tools").rglob("*.py")):
        module = _module(path)
        mine = _tool_rank(module)
        for line, target in _imports(path):
            theirs = _tool_rank(target)
            if theirs is None or theirs == -1 or target.split(".")[:3] == module.split(".")[:3]:
                continue
            if theirs > mine or (mine <= 0 and theirs >= 0):  # a leaf (and the package) imports no tool
                wrong.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {_tool_group(mine)} imports {target} "
                             f"({_tool_group(theirs)})")
    assert not wrong, "imports up the groups of xlgen/tools:\n" + "\n".join(wrong)


def test_the_tools_are_grouped():
    tools = PACKAGE / "tools"
    flat = sorted(p.stem for p in tools.glob("*.py"))
    assert flat == sorted(["__init__"] + TOOL_LEAVES), f"xlgen/tools/ holds modules outside the groups: {flat}"
    folders = sorted(p.name for p in tools.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert folders == sorted(TOOL_GROUPS)
    for group in TOOL_GROUPS:
        doc = ast.get_docstring(ast.parse((tools / group / "__init__.py").read_text()))
        assert doc and "May import" in doc, f"xlgen/tools/{group}/__init__.py needs a docstring with 'May import'"


# The code of one pipeline (the real model pair's, the bundled pipeline's KV tools) lives in its
# companion's folder (stages/); the package reaches it only by loading a pipeline's companion.
PIPELINE_CODE = ("real_pair", "real_demo", "byte_lm", "xl_spec_tools", "byte_spec_tools")


def test_the_package_knows_no_pipeline_code():
    named = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "data" in path.relative_to(PACKAGE).parts:
            continue
        text = path.read_text()
        named += [f"{path.relative_to(PACKAGE.parent)}: {word}" for word in PIPELINE_CODE if word in text]
        if "spec_from_file_location" in text and path.relative_to(PACKAGE).as_posix() not in (
                "tools/pipeline/companion.py", "backends/build.py"):  # a companion; generated code
            named.append(f"{path.relative_to(PACKAGE.parent)}: loads Python by path")
    assert not named, "pipeline code named in the package:\n" + "\n".join(named)


def test_every_layer_says_what_it_owns_and_may_import():
    for layer in LAYERS:
        doc = ast.get_docstring(ast.parse((PACKAGE / layer / "__init__.py").read_text()))
        assert doc and "May import" in doc, f"xlgen/{layer}/__init__.py needs a docstring with 'May import'"


def test_the_flat_package_holds_only_the_entry_points():
    flat = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert flat == ["__init__.py", "__main__.py", "build.py", "companion.py", "testing.py"]


def test_public_api_still_imports():
    from xlgen.build import load, load_text  # noqa: F401
    from xlgen.companion import Unavailable, invariant, metrics, plot, reference, report  # noqa: F401
    from xlgen.testing import assert_backends_agree  # noqa: F401
