"""``hqflow backends`` (the registered backends and what each can do; the Azure workspace's targets) and
``hqflow inspect`` (a saved graph, validated and printed)."""
from __future__ import annotations

import dataclasses
import json

from hqflow.ir.text import one_line

from .pool import UsageError, key_value, warn_secrets


def cmd_backends(args) -> int:
    from hqflow.backends import backend_names, make_backend

    azure = dict(key_value(item, "--azure-opt", parse=str) for item in args.azure_opt)  # values as text
    warn_secrets(azure, "--azure-opt")
    for name in backend_names():
        try:
            backend = make_backend(name)
            caps = backend.capabilities
            backend.close()  # made only to ask
        except Exception as exc:  # a missing plugin or device shows as unavailable
            _unavailable(args, name, str(exc))
            continue
        _line(args, {"name": name, "available": True, **dataclasses.asdict(caps)}, f"{name:<28} {caps.describe()}")
    _azure_targets(args, azure)
    return 0


def _line(args, record: dict, text: str) -> None:
    """One line of ``hqflow backends``: ``record`` with --json, else ``text``."""
    print(json.dumps(record) if args.json else text, file=args.json_out)


def _unavailable(args, name: str, reason: str) -> None:
    reason = reason.splitlines()[0]
    _line(args, {"name": name, "available": False, "reason": reason}, f"{name:<28} unavailable: {reason}")


def _azure_targets(args, options: dict) -> None:
    """The targets of the configured Azure Quantum workspace, or, in one line, why none (the settings unset)."""
    from hqflow.backends import BackendError
    from hqflow.backends.azure.backend import AzureBackend

    try:
        found = AzureBackend("any", **options).targets()
    except (BackendError, TypeError) as exc:
        return _unavailable(args, "azure:<target>", str(exc))
    for provider, target, status in found:
        _line(args, {"name": f"azure:{target}", "available": status == "Available", "provider": provider,
                     "status": status}, f"{f'azure:{target}':<28} {status} (provider {provider})")


def cmd_inspect(args) -> int:
    from hqflow.ir.graph import Graph, GraphError

    from hqflow.pipeline import registry_backends
    from hqflow.trace import read_text

    try:
        graph = Graph.from_json(read_text(args.graph, "a graph document (JSON)"))
        graph.validate(registry_backends(graph), resolve=not args.no_resolve)
    except GraphError as exc:
        hint = ("; --no-resolve checks the graph without importing its functions"
                if not args.no_resolve and "cannot import function" in str(exc) else "")
        raise UsageError(f"{args.graph}: {exc}{hint}") from None
    except ValueError as exc:  # read_text's: no such file, not text
        raise UsageError(str(exc)) from None
    print(graph)
    if args.png:
        print(f"drew {one_line(graph.draw(args.png))}")
    return 0
