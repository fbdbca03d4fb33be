"""The import graph of core/ as a reader meets it: the engine's modules never import back up, and the
embedded family sits in its own subpackage."""
import ast
from pathlib import Path

CORE = Path(__file__).resolve().parent.parent / "core"


def module_name(path: Path) -> str:
    parts = path.relative_to(CORE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every core module the file imports, at module level or inside a function."""
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                found.add(f"{target}.{alias.name}" if (CORE.parent / f"{target}.{alias.name}".replace(".", "/")).exists()
                          or (CORE.parent / (f"{target}.{alias.name}".replace(".", "/") + ".py")).exists() else target)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return {m for m in found if m.startswith("core") and m != me}


def graph() -> dict[str, set[str]]:
    mods = {module_name(p): p for p in CORE.rglob("*.py")}
    return {m: {t for t in imports(p) if t in mods} for m, p in mods.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    found, state = [], {}

    def visit(m, stack):
        state[m] = "open"
        for t in sorted(g[m]):
            if state.get(t) == "open":
                found.append(stack[stack.index(t):] + [t])
            elif t not in state:
                visit(t, stack + [t])
        state[m] = "done"
    for m in sorted(g):
        if m not in state:
            visit(m, [m])
    return found


def test_core_imports_form_no_cycle():
    # a child taking a shared type from its own package (methods/ar: `from . import Result`) while the
    # package's registry names the children is one unit, not a cycle; core/__init__ and the CLI sit on top
    g = {m: {t for t in ts if t not in ("core", "core.cli") and not m.startswith(t + ".")} for m, ts in graph().items()}
    assert cycles(g) == []


def test_the_embedded_family_lives_in_its_own_subpackage():
    top = {p.stem for p in CORE.glob("*.py")}
    assert {"domain", "data", "family", "train", "evaluation", "evaluate"}.isdisjoint(top)
    assert {p.stem for p in (CORE / "embedded").glob("*.py")} >= {"domain", "data", "family", "train", "evaluation",
                                                                  "evaluate"}


def test_the_engine_and_the_llamagen_adapter_share_the_pair_type_from_below():
    g = graph()
    assert "core.models.pair" in g["core.engine"] and "core.models.pair" in g["core.models.llamagen"]
    assert "core.engine" not in g["core.models.llamagen"] and "core.methods" not in g["core.config"]
