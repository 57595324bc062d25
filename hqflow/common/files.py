"""Files written atomically: into a temporary file beside the target, then renamed over it.

A reader (or a resumed run) sees the old file or the new one, never half of one. The file gets the
mode ``open()`` would give it (0666 less the umask), not ``mkstemp``'s 0600; a failed write leaves none.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

_UMASK = os.umask(0)
os.umask(_UMASK)


def atomic_write(path: str | os.PathLike, write: Callable[[str], object]) -> str:
    """``write(tmp)`` fills a temporary file in ``path``'s folder, which then replaces ``path``."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    # named after the target (torch.save names its archive after the file: a leading dot is refused)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=os.path.basename(path) + ".tmp-")
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path


def atomic_text(path: str | os.PathLike, text: str) -> str:
    """``text`` (UTF-8) into ``path``, atomically."""
    return atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
