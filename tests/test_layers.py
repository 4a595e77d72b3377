"""The package's layers import one way (design.md §8): core, semantics, frontend, backends,
runtime, tools, then the CLI and the public shims at the top. Every import of an xlgen
module, at module level or inside a function, goes to the same layer or a lower one."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "xlgen"
LAYERS = ["core", "semantics", "frontend", "backends", "runtime", "tools"]
TOP = len(LAYERS)  # xlgen/cli.py, __main__.py and the public shims (build.py, testing.py, companion.py)


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


def test_every_layer_says_what_it_owns_and_may_import():
    for layer in LAYERS:
        doc = ast.get_docstring(ast.parse((PACKAGE / layer / "__init__.py").read_text()))
        assert doc and "May import" in doc, f"xlgen/{layer}/__init__.py needs a docstring with 'May import'"


def test_the_flat_package_holds_only_the_entry_points():
    flat = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert flat == ["__init__.py", "__main__.py", "build.py", "cli.py", "companion.py", "testing.py"]


def test_public_api_still_imports():
    from xlgen.build import load, load_text  # noqa: F401
    from xlgen.companion import Unavailable, invariant, metrics, plot, reference, report  # noqa: F401
    from xlgen.testing import assert_backends_agree  # noqa: F401
