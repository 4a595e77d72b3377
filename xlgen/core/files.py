"""Reading sources and writing outputs without surprises.

Sources are read only from regular files, up to MAX_SOURCE_BYTES (a FIFO would
block, /dev/zero never ends). Outputs are written atomically: a temporary file
in the target's directory, then os.replace, so a failure (disk full, a file
size limit, a permission) leaves the old file as it was. A generated file's
name in an output directory must be free or a regular file: xlgen never writes
through a symbolic link (it could point anywhere). Every failure is a
FileProblem whose message names the path and says what to do.

The same holds for files a library writes by name (matplotlib's savefig, pyarrow:
`write_with` gives it a temporary name beside the target) and for appends
(`open_for_append`: O_NOFOLLOW, a regular file only); `output_directory` checks a
command's output directory and its files' names before a long run.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path

MAX_SOURCE_BYTES = 1 << 20  # 1 MiB: ~100 times the bundled pipeline's largest file


class FileProblem(Exception):
    """A file-system failure on `path`, explained for the user."""

    def __init__(self, path, message: str):
        super().__init__(message)
        self.path = str(path)
        self.message = message


def _open_source(path: Path) -> int:
    """An open descriptor of the readable regular file `path`; FileProblem otherwise."""
    name = str(path)
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below).
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise FileProblem(path, f"no such file: '{name}'") from None
    except ValueError:  # a NUL character
        raise FileProblem(path, f"'{name}' is not a valid path (it contains a NUL character)") from None
    except OSError as exc:
        raise FileProblem(path, _cannot_read(name, exc)) from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise FileProblem(path, f"'{name}' is a directory, not an .xl file")
        if not stat.S_ISREG(mode):
            raise FileProblem(path, f"'{name}' is not a regular file (a {_kind(mode)}); give an .xl file")
    except OSError as exc:
        os.close(fd)
        raise FileProblem(path, _cannot_read(name, exc)) from None
    except FileProblem:
        os.close(fd)
        raise
    return fd


def check_source_file(path: Path) -> None:
    """FileProblem unless `path` can be opened as a readable regular file (its content is not read):
    the command line refuses a source it cannot open as a usage error, before anything runs."""
    os.close(_open_source(path))


def read_source_bytes(path: Path) -> bytes:
    """The bytes of a source file; FileProblem unless it is a readable regular file of at most 1 MiB."""
    name = str(path)
    fd = _open_source(path)
    try:
        data = _read_at_most(fd, MAX_SOURCE_BYTES + 1)  # not st_size: a file may grow while it is read
    except OSError as exc:
        raise FileProblem(path, _cannot_read(name, exc)) from None
    finally:
        os.close(fd)
    if len(data) > MAX_SOURCE_BYTES:
        raise FileProblem(path, f"'{name}' is larger than {MAX_SOURCE_BYTES} bytes (1 MiB), the limit for an .xl "
                                "source; split it into files that import each other")
    return data


def read_source_bytes_any(path: Path) -> bytes:
    """The bytes of a regular file of any size (a results file); FileProblem for a FIFO, a device,
    a directory, a link loop or an unreadable file."""
    name = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise FileProblem(path, f"no such file: '{name}'") from None
    except OSError as exc:
        raise FileProblem(path, _cannot_read(name, exc)) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise FileProblem(path, f"'{name}' is not a regular file (a "
                                    f"{'directory' if stat.S_ISDIR(mode) else _kind(mode)}); remove it or choose "
                                    "another directory")
        os.set_blocking(fd, True)
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise FileProblem(path, _cannot_read(name, exc)) from None
    finally:
        os.close(fd)


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks, size = [], 0
    while size < limit:
        chunk = os.read(fd, min(1 << 16, limit - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _cannot_read(name: str, exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return f"cannot read '{name}': a symbolic link loop (a link that leads back to itself); fix the link"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"cannot read '{name}': permission denied; make it readable (chmod u+r)"
    return f"cannot read '{name}': {exc.strerror or exc}"


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "special file"


# ---- writing ---------------------------------------------------------------------------------


def ensure_directory(out: Path) -> None:
    """Create the output directory `out` (and its parents), or say why it cannot be."""
    try:
        _ensure_directory(out)
    except OSError as exc:  # e.g. a name too long even to look at
        raise FileProblem(out, f"cannot create directory '{out}': {_why_not_written(exc)}") from None


def _ensure_directory(out: Path) -> None:
    if out.is_dir():
        return
    # (is_dir again: another process may have made it since -- two test workers building one program)
    if out.is_symlink() or out.exists() and not out.is_dir():
        raise FileProblem(out, f"'{out}' exists and is not a directory; choose an output directory")
    blocker = next((p for p in out.parents if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise FileProblem(out, f"cannot create directory '{out}': '{blocker}' is a file, not a directory; "
                               "choose another output directory")
    out.mkdir(parents=True, exist_ok=True)


def output_directory(out: Path, names=(), option: str = "-o") -> None:
    """Create the output directory `out` and make sure the files `names` can be written there
    (before a long run, not after it): FileProblem for a file in the way, a directory that is not
    writable, or a name that is a link, a directory or a special file."""
    ensure_directory(out)
    if not os.access(out, os.W_OK | os.X_OK):
        raise FileProblem(out, f"{option} '{out}': the directory is not writable (permission denied); fix its "
                               "permissions or choose another directory")
    for name in names:
        check_target(Path(out) / name)


def check_target(path: Path) -> bool:
    """Whether `path` exists (as a regular file); FileProblem if it is something xlgen must not replace."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise FileProblem(path, f"cannot use '{path}': {exc.strerror or exc}") from None
    if stat.S_ISLNK(mode):
        raise FileProblem(path, f"'{path}' is a symbolic link; xlgen does not write through links (it could "
                                "point anywhere): remove the link or choose another directory")
    if stat.S_ISDIR(mode):
        raise FileProblem(path, f"'{path}' is a directory where a generated file belongs; remove it or choose "
                                "another output directory")
    if not stat.S_ISREG(mode):
        raise FileProblem(path, f"'{path}' is not a regular file (a {_kind(mode)}); remove it or choose another "
                                "output directory")
    return True


def same_content(path: Path, data: bytes) -> bool:
    """Whether the regular file `path` holds exactly `data` (read only when the sizes agree)."""
    try:
        if os.stat(path).st_size != len(data):
            return False
        return path.read_bytes() == data
    except OSError as exc:
        raise FileProblem(path, _cannot_read(str(path), exc)) from None


def write_atomically(path: Path, data: bytes | str, keep_mode_of: Path | None = None) -> None:
    """Replace `path` with `data` all at once: the old content or the new, never a mixture or a half.

    The new file keeps the permission bits of `keep_mode_of` (the file it replaces) when given.
    A symbolic link, a directory or a special file at `path` is refused (FileProblem).
    """
    if isinstance(data, str):
        data = data.encode("utf-8")

    def put(fd: int, _tmp: Path) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]

    _replace_with(Path(path), put, keep_mode_of)


def write_with(path: Path, produce) -> None:
    """Write `path` through `produce(tmp)`, a function that writes a file by name (matplotlib's
    savefig): into a temporary file of the same suffix beside it, then renamed over `path`.
    Atomic and refusing links, as write_atomically."""
    path = Path(path)
    _replace_with(path, lambda _fd, tmp: produce(tmp), path if check_target(path) else None, close_first=True)


def _replace_with(path: Path, put, keep_mode_of: Path | None = None, close_first: bool = False) -> None:
    check_target(path)  # a link is replaced by os.replace, not followed; refused all the same (it was put there)
    directory = path.parent
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.", suffix=".tmp" + path.suffix)
    except OSError as exc:
        raise FileProblem(path, f"cannot write '{path}': {_why_not_written(exc)}") from None
    try:
        try:
            if close_first:
                os.close(fd)
                fd = None
            put(fd, Path(tmp))
        finally:
            if fd is not None:
                os.close(fd)
        if keep_mode_of is not None:
            os.chmod(tmp, stat.S_IMODE(os.stat(keep_mode_of).st_mode))
        else:  # mkstemp makes 0600; a new output gets the usual 0666 less the umask
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise FileProblem(path, f"cannot write '{path}': {_why_not_written(exc)}; "
                                    "the file is unchanged") from None
        raise


_NOT_WRITTEN = {  # errno -> what went wrong and what to do
    errno.EACCES: "permission denied (the directory is not writable); fix its permissions or choose another place",
    errno.EPERM: "permission denied (the directory is not writable); fix its permissions or choose another place",
    errno.EROFS: "the file system is read-only; choose another place",
    errno.ENOSPC: "no space left on the device; free some space and run again",
    errno.EDQUOT: "disk quota exceeded; free some space and run again",
    errno.EFBIG: "file too large for this process's file size limit (ulimit -f); raise the limit and run again",
    errno.ENOTDIR: "a part of the path is a file, not a directory",
    errno.ENOENT: "its directory does not exist; create it first",
}


def _why_not_written(exc: OSError) -> str:
    return _NOT_WRITTEN.get(exc.errno) or exc.strerror or str(exc)


def open_for_append(path: Path):
    """`path` opened to append text (created when missing): never through a symbolic link, only a
    regular file; a text file object, line-buffered by the caller's flushes."""
    path = Path(path)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags | os.O_NONBLOCK, 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP or os.path.islink(path):
            check_target(path)  # the link message
        if exc.errno == errno.EISDIR:
            raise FileProblem(path, f"'{path}' is a directory; remove it or choose another directory") from None
        raise FileProblem(path, f"cannot write '{path}': {_why_not_written(exc)}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise FileProblem(path, f"'{path}' is not a regular file (a {_kind(mode)}); remove it or choose "
                                    "another directory")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "a", encoding="utf-8")


def refuse_link(path: Path) -> None:
    """FileProblem when `path` is a symbolic link (before a library opens it by name)."""
    if os.path.islink(path):
        check_target(path)
