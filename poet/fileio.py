"""Reading and writing the files POET is given and writes, so that no input gives a traceback and
no output is ever left half-written.

Every file POET writes (schedules, graphs, reports, plots) goes through :func:`atomic_write`: the
bytes go to a temporary file in the same directory, are flushed to the disk, and only then replace
the target in one ``os.replace``.  A full disk, a missing directory or Ctrl-C leave the old file as
it was, and the error names the path.  Every JSON or TOML file POET reads goes through
:func:`read_text`/:func:`read_json`, which turn undecodable bytes, numbers too long to convert and
nesting too deep to parse into one message that names the file and says what would work.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path


class FileWriteError(OSError):
    """A file that could not be written; the old file at that path, if any, is unchanged."""


def _why(e: BaseException) -> str:
    return getattr(e, "strerror", None) or str(e) or type(e).__name__


def atomic_write(path: str | Path, write: Callable, *, binary: bool = False) -> Path:
    """Call ``write(f)`` on a temporary file next to ``path``, fsync it, then move it onto ``path``.

    On any failure the temporary file is removed, ``path`` keeps its old content, and
    :class:`FileWriteError` names ``path``.
    """
    path = Path(path)
    target = Path(os.path.realpath(path))  # through a symlink: its target is what gets replaced
    if target.exists() and not target.is_file():
        raise FileWriteError(
            f"cannot write {path}: it exists and is not a regular file "
            f"({'a directory' if target.is_dir() else 'a device, pipe or socket'}); "
            f"choose another path"
        )
    directory = target.parent
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise FileWriteError(f"cannot write {path}: {_why(e)} (in directory {directory})") from None
    try:
        with os.fdopen(fd, "wb" if binary else "w", encoding=None if binary else "utf-8") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        if target.exists():
            try:
                os.chmod(tmp, target.stat().st_mode & 0o7777)
            except OSError:
                pass
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, target)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            kept = "its old content is unchanged" if target.exists() else "nothing was written"
            raise FileWriteError(f"cannot write {path}: {_why(e)}; {kept}") from None
        raise
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically (see :func:`atomic_write`)."""
    return atomic_write(path, lambda f: f.write(text))


def json_text(obj, what: str, indent: int | None = 1) -> str:
    """``obj`` as standard JSON; ValueError naming ``what`` if it holds NaN or infinity
    (which ``json`` would write as ``NaN``/``Infinity``, not JSON that other tools can read)."""
    try:
        return json.dumps(obj, indent=indent, allow_nan=False)
    except ValueError as e:
        raise ValueError(
            f"{what} holds a number that is not finite (NaN or infinity), which JSON cannot carry: {e}"
        ) from None


def read_text(path: str | Path, what: str, error: type[Exception]) -> str:
    """The file's text as UTF-8 (a byte-order mark is allowed); ``error`` names the file otherwise."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except IsADirectoryError:
        raise error(f"cannot read {what} {path}: it is a directory; give the path of a file") from None
    except OSError as e:
        raise error(f"cannot read {what} {path}: {_why(e)}") from None
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise error(f"{path} is UTF-16 text; POET reads UTF-8: save the {what} as UTF-8")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise error(
            f"{path} is not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}); save the {what} as UTF-8"
        ) from None


def parse_json(text: str, source: str, error: type[Exception]):
    """JSON from ``text``; ``error`` (naming ``source``) for bad syntax, numbers too long to read and
    nesting too deep to parse."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise error(f"{source} is not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    except RecursionError:
        raise error(
            f"{source} is nested too deeply to read (lists or objects inside each other hundreds "
            f"of levels deep); no POET file needs more than a few levels"
        ) from None
    except ValueError as e:  # an integer of more than sys.get_int_max_str_digits() digits
        raise error(f"{source} holds a number POET cannot read ({e})") from None


def read_json(path: str | Path, what: str, error: type[Exception]):
    """The JSON document in the file at ``path`` (see :func:`read_text` and :func:`parse_json`)."""
    return parse_json(read_text(path, what, error), str(path), error)
