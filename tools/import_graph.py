"""Print Kokumi's modules with their line counts and the import graph between them, as text.

``python tools/import_graph.py`` reads the source with :mod:`ast`, so nothing is imported and the
picture is the same with or without the test dependencies; docs/modules.md carries its output.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, name: str, known: set[str]) -> set[str]:
    """The Kokumi modules ``path`` imports, at any depth of the file (lazy imports count too)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        for target in targets:
            module = target
            while module and module not in known:
                module = module.rpartition(".")[0]
            if module and module != name:
                found.add(module)
    # "from kokumi.actors import cluster" also names the package itself: keep the deepest only.
    return {t for t in found if not any(o.startswith(t + ".") for o in found)}


def main() -> int:
    paths = sorted((ROOT / "kokumi").rglob("*.py"))
    names = {module_name(p): p for p in paths}
    width = max(map(len, names))
    total = 0
    print("modules (lines):")
    for name, path in names.items():
        lines = len(path.read_text().splitlines())
        total += lines
        print(f"  {name:<{width}} {lines:>5}")
    print(f"  {'total':<{width}} {total:>5}")
    print("\nimports (Kokumi modules only):")
    for name, path in names.items():
        deps = sorted(imports_of(path, name, set(names)))
        if deps:
            print(f"  {name:<{width}} -> {', '.join(d.removeprefix('kokumi.') for d in deps)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
