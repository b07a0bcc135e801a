"""The folders are the layers (docs/architecture.md): a module sits in ``kokumi.core`` exactly
when it is pure, so that the pure-core contract, which names the package, covers every pure
module the day it is written, and a module that does I/O cannot hide in the core.

Pure means that nothing the module imports, directly or through other modules of Kokumi, does
I/O or runs on Trio. Imports are read with ``ast``, those inside functions included; a parent
package's ``__init__`` is not counted, since it is not what the module depends on.

The architecture page's "where does X live" table is held to the tree too: each path it names
exists and defines the names it gives.

Rooms have doors, not holes: a name one module of Kokumi shares with another is public in the
module that owns it, so that no module reaches for a leading-underscore name of another, whether
imported by name or read as an attribute of an imported module. Tests may still reach them.

And no room is crowded: no module of Kokumi runs over 600 lines, no class over 400, but for the
hub client's ``Client``, a face of verbs that reads better whole, as httpx's client does.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import kokumi

PACKAGE = Path(kokumi.__file__).parent
ROOT = PACKAGE.parent

#: Any of these in a module's imports means it does I/O (or runs on Trio, or logs). ``ssl`` and
#: ``socket`` are not among them: the diagnosis reads their exception types, which is no I/O.
IO = frozenset(
    {
        "anyio",
        "gc",
        "h11",
        "httpcore",
        "httpx",
        "logging",
        "os",
        "pathlib",
        "prometheus_client",
        "shutil",
        "signal",
        "subprocess",
        "sys",
        "tempfile",
        "trio",
    }
)
#: Placed by purpose rather than purity: the object shapes sit below both the core and the
#: client, which read them; the client keeps its pure paths beside its I/O; the test kit is a kit.
EXEMPT = ("kokumi.objects", "kokumi.kube", "kokumi.testing")


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] in ("__init__", "__main__"):
            continue
        found[".".join(parts)] = path
    return found


MODULES = _modules()
#: Kokumi's packages, by dotted name, and where their ``__init__`` is.
PACKAGES = {
    ".".join(path.parent.relative_to(PACKAGE.parent).parts): path
    for path in PACKAGE.rglob("__init__.py")
}


def _imports(name: str) -> tuple[set[str], set[str]]:
    """(Kokumi modules, other top-level packages) that ``name`` imports."""
    ours: set[str] = set()
    theirs: set[str] = set()
    tree = ast.parse(MODULES[name].read_text())
    package = name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                (ours if alias.name.startswith("kokumi.") else theirs).add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            if base == "kokumi" or base.startswith("kokumi."):
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    ours.add(full if full in MODULES else base)
            else:
                theirs.add(base)
    return {m for m in ours if m in MODULES}, {t.split(".")[0] for t in theirs}


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _dotted(node: ast.expr) -> str | None:
    """``a.b.c`` for a chain of attributes over a name, else None."""
    match node:
        case ast.Name(id=name):
            return name
        case ast.Attribute(value=value, attr=attr):
            base = _dotted(value)
            return None if base is None else f"{base}.{attr}"
    return None


def _holes(module: str, source: str, modules: frozenset[str]) -> list[str]:
    """The private names of other Kokumi modules that ``module`` (``source``) reaches, as
    ``line: owner.name``. ``modules`` are the dotted names of Kokumi's modules and packages."""
    package = module if module in PACKAGES else module.rpartition(".")[0]
    bound: dict[str, str] = {}  # local name -> the Kokumi module it stands for
    found = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    if alias.asname:
                        bound[alias.asname] = alias.name
                    else:
                        head = alias.name.split(".")[0]
                        bound[head] = head
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                up = parts[: len(parts) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            if base not in modules:
                continue
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if _is_private(alias.name):
                    found.append(f"{node.lineno}: {full}")
                if full in modules:
                    bound[alias.asname or alias.name] = full
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            dotted = _dotted(node.value)
            if dotted is None:
                continue
            head, _, rest = dotted.partition(".")
            if head in bound:
                owner = ".".join(filter(None, (bound[head], rest)))
                if owner in modules and owner != module:
                    found.append(f"{node.lineno}: {owner}.{node.attr}")
    return found


def _reaches_io(name: str, seen: set[str] | None = None) -> set[str]:
    """The I/O packages ``name`` reaches, with the path through Kokumi's modules."""
    seen = set() if seen is None else seen
    if name in seen:
        return set()
    seen.add(name)
    ours, theirs = _imports(name)
    found = {f"{name} -> {t}" for t in theirs & IO}
    for module in sorted(ours):
        found |= {f"{name} -> {path}" for path in _reaches_io(module, seen)}
    return found


def test_every_module_of_the_core_is_pure() -> None:
    impure = {
        name: sorted(_reaches_io(name))
        for name in MODULES
        if name.startswith("kokumi.core.") and _reaches_io(name)
    }
    assert impure == {}


def test_every_pure_module_is_in_the_core() -> None:
    pure_elsewhere = [
        name
        for name in MODULES
        if not name.startswith(("kokumi.core.", *(f"{e}." for e in EXEMPT)))
        and name not in EXEMPT
        and not _reaches_io(name)
    ]
    assert pure_elsewhere == []


def test_the_check_sees_io_through_other_modules() -> None:
    """The closure is followed: the manager reaches Trio only through the modules it imports."""
    assert any(path.endswith("-> trio") for path in _reaches_io("kokumi.runtime.probe.checks"))
    assert not _reaches_io("kokumi.core.registry.ownership")


def test_no_module_reaches_a_private_name_of_another() -> None:
    """What modules share is public in the module that owns it (docs/architecture.md)."""
    modules = frozenset(MODULES) | frozenset(PACKAGES)
    holes = {
        name: found
        for name, path in sorted({**MODULES, **PACKAGES}.items())
        if (found := _holes(name, path.read_text(), modules))
    }
    assert holes == {}


def test_the_check_sees_private_names_imported_and_read() -> None:
    """Both ways through a wall are seen, relative imports included; a module's own names,
    dunders and the private names of other packages are not holes."""
    modules = frozenset({"kokumi", "kokumi.a", "kokumi.a.b", "kokumi.a.c", "kokumi.d"})
    source = """
import kokumi.a.b
import kokumi.d as d
from kokumi.a import c
from kokumi.a.b import _one, __version__, two
from . import c as see
from .b import _three
from trio import _core

kokumi.a.b._four
d._five
c._six
see._seven
d.__name__
_one._not_a_module
c.__class__._private
"""
    assert _holes("kokumi.a.e", source, modules) == [
        "5: kokumi.a.b._one",
        "7: kokumi.a.b._three",
        "10: kokumi.a.b._four",
        "11: kokumi.d._five",
        "12: kokumi.a.c._six",
        "13: kokumi.a.c._seven",
    ]


def _where_rows() -> list[tuple[str, list[tuple[str, list[str]]]]]:
    """The architecture page's "where does X live" table: (behaviour, [(path, names)])."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Where does X live", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0].startswith(("behaviour", "---")):
            continue
        paths = re.findall(r"`([^`]+\.py)`", cells[1])
        groups = [re.findall(r"`([^`]+)`", group) for group in cells[2].split(";")]
        assert len(paths) == len(groups), line
        rows.append((cells[0], list(zip(paths, groups, strict=True))))
    return rows


def _defined(tree: ast.Module) -> set[str]:
    """Top-level names a module binds, and ``Class.method`` for the methods of its classes."""
    names: set[str] = set()
    for node in tree.body:
        match node:
            case ast.ClassDef(name=name, body=body):
                names.add(name)
                names |= {
                    f"{name}.{item.name}"
                    for item in body
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
                }
            case ast.FunctionDef(name=name) | ast.AsyncFunctionDef(name=name):
                names.add(name)
            case ast.Assign(targets=targets):
                names |= {t.id for t in targets if isinstance(t, ast.Name)}
            case ast.AnnAssign(target=ast.Name(id=name)):
                names.add(name)
    return names


def test_the_where_table_names_what_exists() -> None:
    """docs/architecture.md tells a newcomer where eleven behaviours of the spec live; a move that
    leaves the table behind fails here."""
    rows = _where_rows()
    assert len(rows) == 11
    for behaviour, places in rows:
        for path, names in places:
            source = ROOT / path
            assert source.is_file(), f"{behaviour}: {path} does not exist"
            missing = set(names) - _defined(ast.parse(source.read_text()))
            assert not missing, f"{behaviour}: {path} defines no {sorted(missing)}"


MAX_MODULE_LINES = 600
MAX_CLASS_LINES = 400
#: Classes allowed past MAX_CLASS_LINES, each alone in its module but for its imports. The hub
#: client is one face of verbs (get, list, watch, patch, ...) over one connection pool and one
#: retry rule; split by mixins it would read as several half-classes of one object.
WHOLE = {"kokumi.kube.client": "Client"}


def _lengths(name: str) -> tuple[int, dict[str, int]]:
    """A module's lines, and each of its classes' (nested ones too)."""
    text = MODULES[name].read_text()
    classes = {
        node.name: (node.end_lineno or node.lineno) - node.lineno + 1
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.ClassDef)
    }
    return len(text.splitlines()), classes


def test_no_module_is_over_600_lines_nor_a_class_over_400() -> None:
    crowded = []
    for name in sorted(MODULES):
        lines, classes = _lengths(name)
        whole = WHOLE.get(name)
        for cls, length in classes.items():
            if length > MAX_CLASS_LINES and cls != whole:
                crowded.append(f"{name}.{cls}: {length} lines")
        # A module holding a whole class may run past the limit by that class alone.
        room = lines - classes[whole] + MAX_CLASS_LINES if whole else lines
        if room > MAX_MODULE_LINES:
            crowded.append(f"{name}: {lines} lines")
    assert crowded == []


def test_the_whole_classes_are_still_whole_and_alone() -> None:
    """An exception named here that no longer needs it, or that gained neighbours, fails."""
    for name, cls in WHOLE.items():
        lines, classes = _lengths(name)
        assert classes[cls] > MAX_CLASS_LINES, f"{name}.{cls} fits the rule now: drop it from WHOLE"
        assert lines - classes[cls] <= 100, f"{name} holds more than {cls} and its imports"
