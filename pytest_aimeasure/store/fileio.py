"""Writing files so that nothing is half-written or hidden: the package's one atomic-write helper.

Every file the plugin replaces (run metadata, artifacts, the baseline, the JSON results, the budget
ledger) goes through :func:`atomic_write`:

* the new content goes to a temporary file in the target's own folder (a rename across file systems
  is not atomic), is flushed and fsync-ed, then ``os.replace``-d over the target, and the folder is
  fsync-ed so the rename itself survives a power cut. A reader sees the old file or the new one,
  never a mix; a write that fails (full disk, Ctrl-C) leaves the old file as it was;
* a new file gets the permissions any other program would give it: ``0o666`` minus the user's umask
  (``tempfile.mkstemp`` would make it ``0600`` and hide a committed baseline or a CI artifact from the
  rest of the team). A file that already exists keeps its permission bits.

Lock files never go next to the user's files (:func:`lock_path`): a lock for ``/repo/x.json`` lives
in a per-user folder of the system's temporary directory, named after the target's resolved path, so
every process that writes the same file (two terminals, CI jobs on one machine, xdist controllers with
different stores) takes the same lock, and ``git status`` stays clean.

This module is the ground floor: it imports nothing of the package.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import tempfile
from pathlib import Path

__all__ = ["atomic_write", "fsync_dir", "lock_path"]

_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
_NEW_FILE_MODE = 0o666  # minus the umask, applied by the kernel at creation, as for any program


def fsync_dir(path: Path) -> None:
    """Make a created or renamed entry of folder ``path`` durable (POSIX only; a no-op elsewhere).

    Some file systems refuse to fsync a directory; the data itself is already synced then."""
    if os.name != "posix":
        return
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path | str, data: bytes | str, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` (str is written as UTF-8, newlines untouched).

    Readers see the old or the new file, never a mix; on any failure the old file is left intact
    and the temporary file removed. ``durable=False`` skips both fsyncs, for files that live no
    longer than the session writing them (the budget ledger): still atomic, not crash-proof.
    """
    target = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    try:
        keep_mode: int | None = target.stat().st_mode & 0o7777
    except FileNotFoundError:
        keep_mode = None
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, _CREATE_FLAGS, _NEW_FILE_MODE)
    try:
        try:
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view) :]
            if keep_mode is not None:
                os.chmod(tmp, keep_mode)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        fsync_dir(target.parent)


def _lock_root() -> Path:
    try:
        who = str(os.getuid())
    except AttributeError:  # Windows
        who = os.environ.get("USERNAME") or "user"
    return Path(tempfile.gettempdir()) / f"pytest-aimeasure-locks-{who}"


def lock_path(target: Path | str) -> Path:
    """Where the lock guarding ``target`` lives: outside the user's tree, the same for every process
    of this user that writes the same file. The folder is created (``0700``) on first use."""
    resolved = Path(target).resolve()
    digest = hashlib.sha256(str(resolved).encode("utf-8", "surrogateescape")).hexdigest()[:32]
    root = _lock_root()
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    return root / f"{resolved.name}-{digest}.lock"
