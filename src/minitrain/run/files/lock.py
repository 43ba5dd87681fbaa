"""A run folder's lock: the one process that writes a run holds an flock on RUN/.lock."""
from __future__ import annotations

import errno
import fcntl
import os
import stat
from pathlib import Path

from minitrain.core.errors import UserError
from minitrain.run.files.atomic import UMASK, disk_error
from minitrain.run.reader import LOCK_HEADER, LOCK_NAME, holder_pid, live_pid

class RunLock:
    """An exclusive advisory lock on a run folder (`fcntl.flock` on RUN/.lock), held by the one process that
    writes the run. The OS releases it when that process ends, however it ends (SIGKILL included), so a
    lock is never stale. The file stays (deleting a lock file races with a process about to take it) and
    names the last holder's pid; whether the run is live is the lock, never the file's text.

    An flock belongs to the open file, not to the process: a child forked while it is held (a forked lab
    run, a DataLoader worker) would share it and keep the run "live" after the writer is killed. So a
    forked child closes every lock descriptor it inherited (_close_inherited_locks), and the writer starts
    no subprocess while it holds the lock (run/provenance.py runs git and uname before)."""

    def __init__(self, run: Path, fd: int):
        self.run, self.fd, self.pid = Path(run), fd, os.getpid()
        _HELD.add(fd)

    def release(self) -> None:
        if self.fd is not None and self.pid == os.getpid():  # in a forked child the fd is already closed
            _HELD.discard(self.fd)
            os.close(self.fd)  # closing the descriptor releases the flock
        self.fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


_HELD: set[int] = set()  # descriptors of the run locks this process holds


def _close_inherited_locks() -> None:
    """In a forked child: close (never unlock: that would unlock the parent's too) the inherited locks."""
    for fd in _HELD:
        try:
            os.close(fd)
        except OSError:
            pass
    _HELD.clear()


os.register_at_fork(after_in_child=_close_inherited_locks)


def _live_error(run: Path, pid: str) -> UserError:
    return UserError(f"{run} is live: process {pid} is writing it (lock {Path(run) / LOCK_NAME}); wait for it to "
                     "end or stop that process, then run again")


def refuse_if_live(run: Path) -> None:
    """A command that would write or delete RUN is refused while another process writes it."""
    pid = live_pid(run)
    if pid is not None:
        raise _live_error(run, pid)


def lock_run(run: Path) -> RunLock:
    """Take RUN's lock or refuse, naming the process that holds it. RUN must exist.

    The lock file is opened without following a link, and rewritten only when it is minitrain's: a regular
    file with one name, empty or starting with LOCK_HEADER. A run folder received from someone else may hold
    a `.lock` that links (symbolically or hard) to any file the user can write; that file is never touched
    (a resume also refuses a linked metrics.jsonl or checkpoints/: refuse_links)."""
    run = Path(run)
    path = run / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o666 & ~UMASK)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise _not_our_lock(path, "a symbolic link") from None
        raise disk_error(e, path) from None
    try:
        _check_our_lock(fd, path)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise _live_error(run, holder_pid(path)) from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.write(fd, f"{LOCK_HEADER}\npid {os.getpid()}\n".encode())
    return RunLock(run, fd)


def _not_our_lock(path: Path, what: str) -> UserError:
    return UserError(f"{path} is {what}, not minitrain's lock file; nothing was written. Remove it (rm {path}) "
                     "if the folder is yours, then run again")


def _check_our_lock(fd: int, path: Path) -> None:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise _not_our_lock(path, "not a regular file")
    if st.st_nlink != 1:
        raise _not_our_lock(path, f"a file with {st.st_nlink} names (a hard link to another file)")
    head = os.pread(fd, len(LOCK_HEADER), 0)
    if head and head != LOCK_HEADER.encode():
        raise _not_our_lock(path, "a file minitrain did not write")

