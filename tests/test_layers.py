"""The layering rules of shared/DESIGN.md, checked on the source: the IR imports nothing of hqflow's,
backends import the IR only, the core's rooms import one way (the core knows no workload; only the CLI
does), and hqflow's modules import one another without cycles, counting imports inside functions too."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"ir": "hqflow.ir", "backends": "hqflow.backends", "workloads": "hqflow.workloads", "cli": "hqflow.cli",
            "hqflow": "hqflow"}


def _modules() -> dict[str, Path]:
    out = {}
    for folder, package in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            name = ".".join((package, *parts))
            out[name.removesuffix(".__init__")] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """hqflow modules that ``name`` imports anywhere in its file (a name imported from a package counts as
    its submodule when there is one)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        found |= {t for t in targets if t in MODULES and t != name}
    return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def test_the_ir_imports_nothing_of_hqflows():
    bad = {m: sorted(t for t in ts if not t.startswith("hqflow.ir")) for m, ts in GRAPH.items() if m.startswith("hqflow.ir")}
    assert not {m: ts for m, ts in bad.items() if ts}


def test_backends_import_the_ir_only():
    bad = {m: sorted(t for t in ts if not t.startswith(("hqflow.ir", "hqflow.backends")))
           for m, ts in GRAPH.items() if m.startswith("hqflow.backends")}
    assert not {m: ts for m, ts in bad.items() if ts}


# The rooms, lowest first: a module imports its own room and the rooms before it, never one after (no allowlist).
# ``api`` is what users import at the top of the package: hqflow itself (hq.run), the pipeline builder and the
# old public paths (hqflow.distribution, hqflow.placement, hqflow.trace_export).
ROOMS = ("ir", "backends", "common", "trace", "jobs", "gradients", "engine", "torch", "planning", "api", "workloads", "cli")


def room(module: str) -> str:
    part = (module.split(".") + [""])[1]
    return part if part in ROOMS else "api"


def test_the_rooms_import_one_way():
    """The room matrix: every import between rooms runs from a later room to an earlier one."""
    bad = sorted(f"{m} ({room(m)}) imports {t} ({room(t)})" for m, ts in GRAPH.items() for t in ts
                 if ROOMS.index(room(t)) > ROOMS.index(room(m)))
    assert bad == []


def test_the_core_folder_knows_no_workload():
    """``hqflow/`` (the core) imports neither the workloads nor the face above them: the hqflow command is
    ``cli/``, a folder of its own at the top like ``workloads/`` (installed as ``hqflow.cli``)."""
    core = {m: ts for m, ts in GRAPH.items() if MODULES[m].is_relative_to(ROOT / "hqflow")}
    assert "hqflow.engine.scheduler" in core and not any(room(m) in ("workloads", "cli") for m in core)
    assert sorted(f"{m} imports {t}" for m, ts in core.items() for t in ts if room(t) in ("workloads", "cli")) == []


def test_every_core_module_sits_in_a_room():
    """The core's folders are its rooms; at the top of the package sit only the public faces users import."""
    top = sorted(m for m in GRAPH if m.count(".") == 1 and room(m) == "api")
    assert top == ["hqflow.distribution", "hqflow.pipeline", "hqflow.placement", "hqflow.trace_export"]


def test_no_import_cycles():
    index, low, stack, on_stack, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in GRAPH:
        if v not in index:
            visit(v)
    # None at all, the IR's included: validate, serialize and draw read a graph without importing
    # graph.py (they build on ir/nodes.py), and graph.py imports them at its top for Graph's methods.
    assert cycles == []


def test_the_ground_floors_load_alone():
    """``import hqflow.ir`` (or the backends) loads no floor above it: the package's names load on first use."""
    import subprocess
    import sys

    code = ("import sys, hqflow.ir, hqflow.backends; "
            "above = sorted(m for m in sys.modules if m.split('.')[:2] in (['hqflow', 'engine'], "
            "['hqflow', 'planning'], ['hqflow', 'jobs'], ['hqflow', 'workloads'])); "
            "print(above)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]", proc.stdout
    proc = subprocess.run([sys.executable, "-c", "import hqflow as hq; print(hq.run.__module__, hq.trace.__name__)"],
                          capture_output=True, text=True, timeout=120)
    assert proc.stdout.split() == ["hqflow", "hqflow.trace"], proc.stderr[-2000:]


def test_every_package_is_installed():
    """A plain ``pip install .`` ships every package on disk: pyproject.toml lists them by hand."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {name for name, path in MODULES.items() if path.name == "__init__.py"}
    assert on_disk - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"


def test_core_modules_and_classes_stay_readable():
    """Issue 36: no module of the core over 400 lines, no class over 250 (a module read in one sitting)."""
    long_modules = {m: n for m, p in MODULES.items() if room(m) not in ("ir", "backends", "workloads")
                    and (n := len(p.read_text().splitlines())) > 400}
    long_classes = {f"{m}.{c.name}": c.end_lineno - c.lineno + 1 for m, p in MODULES.items()
                    if room(m) not in ("ir", "backends", "workloads")
                    for c in ast.walk(ast.parse(p.read_text())) if isinstance(c, ast.ClassDef)
                    and c.end_lineno - c.lineno + 1 > 250}
    assert (long_modules, long_classes) == ({}, {})
