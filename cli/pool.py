"""What the subcommands share: ``UsageError``; the argparse types of a choice (any case, did you mean) and of an
output file (tried at once); and the pool spec ``[(name, options), ...]`` that ``--backend NAME``, ``--pool N``
and ``--backend-opt [K:]KEY=VALUE`` give ``hqflow run``, ``plan`` and ``train``.

A secret given as an option (``key``, ``connection_string``) is taken with a one-line warning: the command
line shows in ``ps`` and the shell's history. Run directories never store secrets."""
from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
import tempfile

from hqflow.backends import SECRETS
from hqflow.ir.text import one_line, shown


class UsageError(Exception):
    """Bad usage or bad input: reported on one line, exit status 2."""


def warn_secrets(keys, flag: str) -> None:
    """One line on stderr when ``keys`` (options given on the command line) hold a secret."""
    given = sorted({k for k in keys if k in SECRETS})
    if given:
        print(f"hqflow: warning: {flag} {given[0]}=... puts a secret on the command line, where ps and the shell's "
              "history show it; set AZURE_QUANTUM_API_KEY (or AZURE_QUANTUM_CONNECTION_STRING) in the environment, "
              "or sign in with az login, instead", file=sys.stderr)


def key_value(item: str, flag: str, keys=None, parse=None) -> tuple:
    """``KEY=VALUE`` as ``(KEY, parse(VALUE))`` (default: ``value``): KEY an identifier, and one of ``keys``
    where given. The one parser of every ``KEY=VALUE`` flag."""
    key, sep, text = item.partition("=")
    if not sep or not key.isidentifier() or key not in (keys or [key]):
        raise UsageError(f"{flag} {item!r}: expected KEY=VALUE" + (f" with KEY one of {', '.join(sorted(keys))}"
                                                                   if keys else ""))
    return key, (parse or value)(text)


def value(text: str):
    """A JSON value where the text is one (``0.05``, ``true``, ``[1, 2]``), else the text itself."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def make_folder(path: str, what: str = "run directory ") -> None:
    """Make folder ``path`` (a usage error where it cannot be made or written in: ``output``'s checks)."""
    try:
        os.makedirs(output(folder=True)(path), exist_ok=True)
    except (argparse.ArgumentTypeError, OSError, ValueError) as exc:  # ValueError: a NUL or a lone surrogate
        raise UsageError(f"cannot create {what}{path}: {getattr(exc, 'strerror', None) or exc}") from None


def _probe(path: str) -> str | None:
    """Why ``atomic_write``'s temporary file for ``path`` cannot be made (None: made and removed; not os.access,
    which says yes to root, even in /proc)."""
    try:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=os.path.basename(path) + ".tmp-")
        os.close(fd)
        os.unlink(tmp)
    except (OSError, ValueError) as exc:  # ValueError: a NUL or a lone surrogate in the name
        return f"cannot write there: {getattr(exc, 'strerror', None) or exc}"
    return None


def output(*extensions: str, folder: bool = False):
    """An argparse type: the path of a file a command writes (``folder``: of a folder, made when the work starts),
    refused at once where it cannot be written: no name, a name not ending in one of ``extensions`` (if given), a
    folder for a file or a file for a folder, a missing or unwritable folder (for a new folder: its nearest)."""
    def parse(path: str) -> str:
        where, child = (os.path.abspath(path), "x") if folder else os.path.split(os.path.abspath(path))
        while folder and not os.path.exists(where):  # a new folder is made in its nearest existing one
            where, child = os.path.split(where)
        if not path or not path.lower().endswith(extensions or ""):
            why = f"the name must end in {', '.join(extensions)}" if path else "no name"
        elif os.path.exists(path) and os.path.isdir(path) != folder:
            why = "is a file; give a folder" if folder else "is a directory; give a file name"
        elif not os.path.isdir(where):
            why = f"{where} is a file" if folder else f"no such folder {where}"
        else:
            why = "not writable" if os.path.exists(path) and not os.access(path, os.W_OK) else \
                _probe(os.path.join(where, child))
        if why:
            raise argparse.ArgumentTypeError(f"{path}: {why}")
        return path
    return parse


def choice(names, what: str = "invalid choice:", also: str = ""):
    """An argparse type: one of ``names`` (or of what the function ``names`` returns), in any case; anything else
    is refused in one line with the close spellings (did you mean) and every name (then ``also``)."""
    def parse(text: str) -> str:
        known = list(names() if callable(names) else names)
        folded = {n.lower(): n for n in known}
        if text.lower() in folded:
            return folded[text.lower()]
        near = [folded[n] for n in difflib.get_close_matches(text.lower(), list(folded), n=2, cutoff=0.6)]
        hint = f" (did you mean {' or '.join(near)}?)" if near else ""
        raise argparse.ArgumentTypeError(f"{what} {shown(text)}{hint}; known: {', '.join(known)}{also}")
    return parse


def show_figures(args, figures: dict, width: int) -> None:
    """A command's figures: one JSON line with --json, else a table of ``width``-wide names."""
    if args.json:
        print(json.dumps(figures, default=float), file=args.json_out)
    else:
        for k, v in figures.items():  # money with two decimals and thousands separated, never 9.09536e+09
            print(f"{k:<{width}} {'unknown' if v is None else f'{v:,.2f}'}" if k in ("spend", "list_cost") else
                  f"{k:<{width}} {v:.6g}" if isinstance(v, float) else f"{k:<{width}} {one_line(str(v))}")


def backend_pool(args, name: str | None = None, always: bool = False, check: bool = True) -> list | None:
    """``--backend`` (or ``name``) with ``--backend-opt`` and ``--pool`` as a pool spec ``[(name, options),
    ...]`` (None without them, unless ``always``); with ``check`` each member is made once here, so a bad
    option is a usage error (``hqflow train`` makes them once, for the run: ``make_member``)."""
    if not args.backend_opt and not args.pool and not always:
        return None
    name, size = name or args.backend or "compiled", args.pool or 1
    shared, own = {}, [{} for _ in range(size)]
    for item in args.backend_opt:
        head, colon, rest = item.partition(":")
        member = bool(colon) and head.isdecimal()
        if member and (len(head) > 3 or int(head) >= size):
            raise UsageError(f"--backend-opt {item!r}: member {head} but the pool has {size} (--pool)")
        key, text = key_value(rest if member else item, "--backend-opt")
        (own[int(head)] if member else shared)[key] = text
    warn_secrets([k for options in [shared, *own] for k in options], "--backend-opt")
    specs = [(name, {**shared, **own[k]}) for k in range(size)]
    if check:
        for member, spec in enumerate(specs):
            make_member(spec, member).close()
    return specs


def make_member(spec, member: int = 0):
    """The backend of a pool spec's member (a name, or ``(name, options)``); a bad name or option is a usage error."""
    from hqflow.backends import BackendError, backend_spec, make_backend

    name, options = backend_spec(spec)
    try:
        return make_backend(spec)
    except (BackendError, TypeError, ValueError) as exc:
        what = f"--backend-opt for {name!r} (member {member})" if options else "--backend"
        raise UsageError(f"{what}: {exc}") from None


def importable_cwd() -> None:
    """Let MODULE:ID environments come from the current directory, as ``python -m`` would find them."""
    if os.getcwd() not in [os.path.abspath(p or os.curdir) for p in sys.path]:
        sys.path.insert(0, os.getcwd())


def with_module(env: str, module: str) -> str:
    """``ENV`` with ``--env-module MODULE``: ``MODULE:ENV``, the form every process imports MODULE from."""
    from hqflow.workloads.rl.envs import SHORT_NAMES

    if not all(part.isidentifier() for part in module.split(".")):
        raise UsageError(f"--env-module {module!r}: expected a module name such as mypkg.envs")
    if ":" in env:
        raise UsageError(f"--env-module {module!r} with {env!r}: give the module once, as MODULE:ID or --env-module")
    if env in SHORT_NAMES:
        raise UsageError(f"--env-module is for an id that MODULE registers, not the short name {env!r}")
    return f"{module}:{env}"
