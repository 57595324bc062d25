"""Command-line pool specs, shared by ``hqflow run``, ``plan`` and ``train``: ``--backend NAME``,
``--pool N`` and ``--backend-opt [K:]KEY=VALUE`` as ``[(name, options), ...]``."""
from __future__ import annotations

import json

from .cli_errors import UsageError


def value(text: str):
    """A JSON value where the text is one (``0.05``, ``true``, ``[1, 2]``), else the text itself."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def backend_pool(args, name: str | None = None, always: bool = False) -> list | None:
    """``--backend`` (or ``name``) with ``--backend-opt`` and ``--pool`` as a pool spec ``[(name, options),
    ...]`` (None without them, unless ``always``); each member is made once here, so a bad option is a
    usage error."""
    from hqflow.backends import BackendError, get_backend

    if not args.backend_opt and not args.pool and not always:
        return None
    name, size = name or args.backend or "compiled", args.pool or 1
    shared, own = {}, [{} for _ in range(size)]
    for item in args.backend_opt:
        target, key_value = shared, item
        head, colon, rest = item.partition(":")
        if colon and head.isdigit():
            if int(head) >= size:
                raise UsageError(f"--backend-opt {item!r}: member {head} but the pool has {size} (--pool)")
            target, key_value = own[int(head)], rest
        key, sep, text = key_value.partition("=")
        if not sep or not key.isidentifier():
            raise UsageError(f"--backend-opt {item!r}: expected [K:]KEY=VALUE")
        target[key] = value(text)
    specs = [(name, {**shared, **own[k]}) for k in range(size)]
    for member, (_, options) in enumerate(specs):
        try:
            backend = get_backend(name, **options)
        except (BackendError, TypeError, ValueError) as exc:
            what = f"--backend-opt for {name!r} (member {member})" if options else "--backend"
            raise UsageError(f"{what}: {exc}") from None
        getattr(backend, "close", lambda: None)()
    return specs
