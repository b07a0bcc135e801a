"""The public surface (docs/architecture.md, *One public surface*), checked as Trio checks its own.

``kokumi`` and ``kokumi.kube`` are the package faces: every public name once, each defined in
one home and re-exported (``kokumi`` lazily, so that the pure modules stay light to import;
``kokumi.kube`` at once, since nothing pure imports it). A name exported
from two places, a face that names something the static view does not, or a pure module that
drags in Trio would each pass every other test; these fail.
"""

from __future__ import annotations

import ast
import importlib
import json
import pkgutil
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

import kokumi
import kokumi.core
import kokumi.kube

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "embedding.md"
FACES = {face.__name__: face for face in (kokumi, kokumi.kube)}
#: What importing a pure module must not load.
HEAVY = ("trio", "httpx", "kokumi.kube", "kokumi.runtime.probe", "kokumi.actors", "kokumi.manager")
CORE = sorted(m.name for m in pkgutil.walk_packages(kokumi.core.__path__, "kokumi.core."))


def _every_module() -> list[types.ModuleType]:
    names = [m.name for m in pkgutil.walk_packages(kokumi.__path__, "kokumi.")]
    return [importlib.import_module(n) for n in names if not n.endswith("__main__")]


def _imported_homes(
    face: str, statements: list[ast.stmt], *, only_imports: bool = False
) -> dict[str, str]:
    """Each name the ``from ... import`` statements bind -> the module it comes from."""
    seen: dict[str, str] = {}
    for stmt in statements:
        if not isinstance(stmt, ast.ImportFrom):
            assert not only_imports, ast.unparse(stmt)
            continue
        base = f"{face}.{stmt.module}" if stmt.level else stmt.module
        for alias in stmt.names:
            assert alias.asname is None, alias.name
            seen[alias.name] = str(base)
    return seen


def _tree(face: types.ModuleType) -> ast.Module:
    assert face.__file__ is not None
    return ast.parse(Path(face.__file__).read_text())


def _homes(face: types.ModuleType) -> dict[str, str]:
    """The lazy face names its homes in ``_HOMES``; the eager one imports from them."""
    if hasattr(face, "_HOMES"):
        homes: dict[str, str] = face._HOMES
        return homes
    return _imported_homes(face.__name__, _tree(face).body)


def _public() -> list[tuple[str, str]]:
    return [(face, name) for face, module in FACES.items() for name in module.__all__]


@pytest.mark.parametrize("face", FACES)
def test_all_is_sorted_without_duplicates(face: str) -> None:
    names = FACES[face].__all__
    assert names == sorted(set(names))


@pytest.mark.parametrize("face", FACES)
def test_every_name_resolves_and_has_a_home(face: str) -> None:
    module = FACES[face]
    assert sorted(_homes(module)) == module.__all__
    for name in module.__all__:
        assert getattr(module, name) is not None, name
        assert name in dir(module), name
    with pytest.raises(AttributeError):
        module.NoSuchName  # noqa: B018


@pytest.mark.parametrize("face", FACES)
def test_the_static_view_is_the_run_time_one(face: str) -> None:
    """mypy and IDEs read what the face imports: for the lazy face the ``TYPE_CHECKING``
    imports, which must be ``_HOMES``; the eager face imports exactly its ``__all__``."""
    module = FACES[face]
    blocks = [
        node
        for node in _tree(module).body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "_typing.TYPE_CHECKING"
    ]
    if hasattr(module, "_HOMES"):
        (block,) = blocks
        assert _imported_homes(face, block.body, only_imports=True) == _homes(module)
    else:
        assert blocks == []
        assert sorted(_homes(module)) == module.__all__


def _defines(module: types.ModuleType, name: str) -> bool:
    """Whether the module's own top level binds ``name`` (not by importing it)."""
    assert module.__file__ is not None
    for node in ast.parse(Path(module.__file__).read_text()).body:
        match node:
            case ast.ClassDef() | ast.FunctionDef() | ast.AsyncFunctionDef() if node.name == name:
                return True
            case ast.Assign(targets=targets) if any(
                isinstance(t, ast.Name) and t.id == name for t in targets
            ):
                return True
            case ast.AnnAssign(target=ast.Name(id=target)) if target == name:
                return True
    return False


def test_each_public_name_has_exactly_one_home() -> None:
    modules = _every_module()
    for face, name in _public():
        value = getattr(FACES[face], name)
        home = importlib.import_module(_homes(FACES[face])[name])
        assert getattr(home, name) is value, f"{face}.{name}"
        assert _defines(home, name), f"{home.__name__} does not define {name}"
        assert name in home.__all__, f"{home.__name__}.__all__ forgets {name}"
        if isinstance(value, type | types.FunctionType):
            assert value.__module__ == home.__name__, f"{face}.{name}"
        again = [
            m.__name__
            for m in modules
            if m is not home
            and m.__name__ not in FACES
            and name in getattr(m, "__all__", ())
            and getattr(m, name) is value
        ]
        assert not again, f"{face}.{name} is defined in {home.__name__}, re-exported by {again}"


def test_the_faces_agree() -> None:
    for name in set(kokumi.__all__) & set(kokumi.kube.__all__):
        assert getattr(kokumi, name) is getattr(kokumi.kube, name), name


def test_the_embedding_doc_names_only_exported_names() -> None:
    text = DOC.read_text()
    chains = re.findall(r"\bkokumi((?:\.\w+)+)", text)
    assert chains, "docs/embedding.md names nothing of kokumi"
    for chain in chains:
        first, *rest = chain.lstrip(".").split(".")
        assert first in kokumi.__all__, f"docs/embedding.md names kokumi{chain}: export {first}"
        value = getattr(kokumi, first)
        for attribute in rest:
            value = getattr(value, attribute)


# --- what an import loads, in a fresh interpreter ------------------------------------------


def _loaded_after(code: str) -> set[str]:
    script = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


def _heavy(loaded: set[str]) -> set[str]:
    return {h for h in HEAVY if h in loaded or any(m.startswith(f"{h}.") for m in loaded)}


def test_a_pure_module_loads_no_trio_no_httpx_no_probe_no_actor() -> None:
    assert _heavy(_loaded_after("import kokumi.core.registry.ownership")) == set()
    assert _heavy(_loaded_after("import kokumi")) == set()
    every = "\n".join(f"import {m}" for m in [*CORE, "kokumi.objects"])
    loaded = _loaded_after(every)
    assert set(CORE) <= loaded
    assert _heavy(loaded) == set()


def test_a_name_of_the_manager_loads_it() -> None:
    """The check above can fail: reaching for the manager through the face loads all of it."""
    assert _heavy(_loaded_after("import kokumi\nkokumi.run_manager")) == set(HEAVY)


def test_watch_in_the_kube_face_is_the_function_whatever_loaded_first() -> None:
    code = (
        "import kokumi.kube.watch\n"
        "from kokumi.kube import watch\n"
        "import kokumi.kube\n"
        "assert watch is kokumi.kube.watch is sys.modules['kokumi.kube.watch'].watch\n"
    )
    _loaded_after(f"import sys\n{code}")
