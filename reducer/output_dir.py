"""The output directory as one run's own: a lock against a second run, no symbolic links planted where we
write, no debris of a dead run, and the previous run's results moved aside, so OUT holds this run's only."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from reducer.errors import ReducerError

LOCK = ".lock"
PREVIOUS = "previous"
# what a reduction leaves as its result: moved to OUT/previous/ when the next run starts
RESULTS = ("minimal.onnx", "minimal.onnx.data", "minimal_inputs.npz", "report.json", "history.jsonl", "bundle",
           "bundle.zip")
# every name we write directly in OUT; the folders among them are ours all the way down
OWN_NAMES = (LOCK, "activations", "work", "cache.jsonl", PREVIOUS, *RESULTS)
OWN_FOLDERS = ("activations", "work", "bundle", PREVIOUS)
# a write went through a temporary name (then an atomic rename): what is left under one is debris
DEBRIS = ("*.tmp", "*.tmp.npz")
# errors of the machine, not of the model nor of ours: no room, no permission
NO_ROOM = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS}
ENVIRONMENT_ERRNOS = {*NO_ROOM, errno.EACCES}
_WORKER_OSERROR = re.compile(r"\[Errno (\d+)\] ([^:']+)(?:: '([^']*)')?")


class OutputError(ReducerError):
    """The output directory cannot be used or written: another run holds it, a symbolic link is planted in
    it, the disk is full, or the folder is read-only. The user's machine, not the model: exit 2."""


class Claim:
    """An output directory held by this run: the lock is released when the run ends (or the process dies)."""

    def __init__(self, out_dir: Path, lock_fd: int):
        self.out_dir = out_dir
        self._lock_fd: int | None = lock_fd

    def release(self) -> None:
        if self._lock_fd is None:
            return
        try:
            remove_debris(self.out_dir)  # a write cut short by an error (a full disk) left it
        except OSError:
            pass  # the next run's claim tries again
        os.close(self._lock_fd)  # the lock goes with it; the file stays, naming the last holder
        self._lock_fd = None


def claim(out_dir: Path) -> Claim:
    """Hold `out_dir` for one run: lock it (OutputError naming the holder when another run has it), refuse
    symbolic links where we would write, and clear what a dead run left half-written."""
    lock_fd = _lock(out_dir)
    try:
        remove_debris(out_dir)  # first: a link left under a temporary name is unlinked, never followed
        refuse_symlinks(out_dir)
        shutil.rmtree(out_dir / "work", ignore_errors=True)  # a dead run's scratch: no live writer, we hold the lock
    except BaseException:
        os.close(lock_fd)
        raise
    return Claim(out_dir, lock_fd)


def _lock(out_dir: Path) -> int:
    """flock on OUT/.lock, never waiting: the kernel drops it when its holder dies, so a lock file left by
    a killed run blocks nothing. The holder writes who it is, for the next run's message."""
    path = out_dir / LOCK
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _planted_link(path) from None
        raise
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 300, 0).decode(errors="replace").strip() or "another run"
        os.close(fd)
        raise OutputError(f"{out_dir} is in use by {holder}: wait for it to end, or choose another -o") from None
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} (started {started})\n".encode(), 0)
    return fd


def refuse_symlinks(out_dir: Path) -> None:
    """A symbolic link where we write would send our writes elsewhere (the activation store into another
    folder, cache lines into another file): refused, naming the link. OUT itself may be one: the user
    named it."""
    for name in OWN_NAMES:
        if (out_dir / name).is_symlink():
            raise _planted_link(out_dir / name)
    for folder in OWN_FOLDERS:
        for root, dirnames, filenames in os.walk(out_dir / folder):  # os.walk does not follow links
            for name in [*dirnames, *filenames]:
                if (Path(root) / name).is_symlink():
                    raise _planted_link(Path(root) / name)


def _planted_link(path: Path) -> OutputError:
    return OutputError(f"{path} is a symbolic link: refused (we write there; remove it, or choose another -o)")


def remove_debris(out_dir: Path) -> None:
    """What a write that never finished left under a temporary name (a full disk, a double Ctrl-C): files,
    and the bundle's staging folder."""
    for folder in (out_dir, out_dir / "activations"):
        for pattern in DEBRIS:
            for path in folder.glob(pattern):
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)


def move_previous_results(out_dir: Path) -> None:
    """The previous run's minimal model, report and bundle go to OUT/previous/ (replacing an older one),
    so that a run whose model does not fail leaves no stale result in OUT. The cache and the activation
    store stay: they are keyed by model, inputs and oracle."""
    found = [name for name in RESULTS if (out_dir / name).exists()]
    if not found:
        return
    previous = out_dir / PREVIOUS
    if previous.is_dir():
        shutil.rmtree(previous)
    else:
        previous.unlink(missing_ok=True)
    previous.mkdir()
    for name in found:
        os.replace(out_dir / name, previous / name)


@contextlib.contextmanager
def environment_errors_said(out_dir: Path) -> Iterator[None]:
    """An OSError of the machine (environment_error) raised inside becomes its one-line OutputError."""
    try:
        yield
    except OSError as exc:
        unwritable = environment_error(exc, out_dir)
        if unwritable is None:
            raise
        raise unwritable from exc


def environment_error(exc: OSError, out_dir: Path) -> OutputError | None:
    """A full disk, a quota, a read-only or unwritable folder, a file size limit: said in one line with the
    path, not blamed on the model nor taken for a bug. None for other errors."""
    if exc.errno not in ENVIRONMENT_ERRNOS:
        return None
    return _said(exc.errno, exc.strerror or os.strerror(exc.errno), exc.filename or out_dir)


def environment_error_in(text: str, where: Path) -> OutputError | None:
    """The same, from an OSError a worker reported as text (the reference run writes the store there)."""
    found = _WORKER_OSERROR.search(text)
    if not found or int(found.group(1)) not in ENVIRONMENT_ERRNOS:
        return None
    return _said(int(found.group(1)), found.group(2).strip(), found.group(3) or where)


def _said(number: int, cause: str, where) -> OutputError:
    return OutputError(f"cannot {'write' if number in NO_ROOM else 'access'} {where}: {cause}")
