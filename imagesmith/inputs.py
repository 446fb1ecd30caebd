"""What a user hands imagesmith, read one way: a file named by a flag or a setting, an integer in text, a TOML
or JSON document.

* :func:`read_user_file` opens a user-named path without blocking and refuses what is not a regular file (a
  FIFO would block forever, a device never end, a folder fail later with a puzzling message), caps the size,
  and names the flag or setting in its error.
* :func:`parse_int` is the one conversion of digits read from user text (nvidia-smi captures, versions,
  sizes): ASCII digits only (Python's ``int`` also takes ``५३५``), and a length bound before ``int()`` (which
  raises a bare ``ValueError`` past 4300 digits).
* :func:`loads_toml` / :func:`loads_json` parse a document and refuse integers no real value has (TOML allows
  64 bits; an integer past Python's digit limit is one error naming the file, not a traceback).
* :func:`check_output_file` checks, when a command starts, the file a flag names that it writes when it ends
  (``--index-file``, ``--summary``): a folder, a FIFO or a folder nothing can be written to is one error now.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import tomllib

from imagesmith.errors import ConfigError, ImagesmithError

#: the most digits an integer imagesmith reads may have: 2**63 has 19; nothing real (memory in MiB, an index,
#: a size in bytes, a version part) comes near
MAX_INT_DIGITS: Final[int] = 19
#: the range TOML promises for integers (TOML 1.0: 64-bit signed)
INT64_MIN: Final[int] = -(2**63)
INT64_MAX: Final[int] = 2**63 - 1
#: the default cap on a user file's size (a capture, a key, a report); readers of bigger files pass their own
MAX_USER_FILE_BYTES: Final[int] = 64 << 20

_ASCII_INT = re.compile(r"[+-]?[0-9]+", re.ASCII)


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def path_kind(path: str | Path) -> str | None:
    """What *path* is when it is not a regular file, as a noun for a message (``a folder``, ``a FIFO (named
    pipe)``, ``a symbolic link to nothing (dangling, or a loop)``); None for a regular file or nothing at
    all (:func:`os.path.lexists` tells those apart). Never blocks."""
    try:
        st = Path(path).stat()
    except FileNotFoundError:
        return "a symbolic link to nothing (dangling, or a loop)" if os.path.lexists(path) else None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symbolic link to nothing (dangling, or a loop)"
        return f"a path that cannot be read ({exc.strerror or exc.__class__.__name__})"
    except ValueError:
        return "a path the system does not accept"
    if stat.S_ISREG(st.st_mode):
        return None
    return "a folder" if stat.S_ISDIR(st.st_mode) else _kind(st.st_mode)


def not_a_file(path: str | Path) -> str | None:
    """Why *path* is not a regular file, as words for a message (``does not exist``, ``is a folder, not a
    regular file``, ``is a FIFO (named pipe), not a regular file``); None when it is one. Never blocks."""
    kind = path_kind(path)
    if kind is not None:
        return f"is {kind}, not a regular file"
    return None if Path(path).is_file() else "does not exist"


def folder_problem(path: str | Path, *, may_be_missing: bool = False) -> str | None:
    """Why *path* is not a folder, as words for a message (``no such folder``, ``is a file, not a folder``,
    ``is a device, not a folder``, ``is a symbolic link to nothing (dangling, or a loop), not a folder``);
    None for a folder, and with *may_be_missing* for a path that does not exist yet (a folder to make). Never
    blocks. Every flag that names a folder asks this first: ``Path.is_dir()`` is False alike for a missing
    path, a file and ``/dev/zero``, and ``rglob`` on a device finds nothing, silently."""
    kind = path_kind(path)
    if kind == "a folder":
        return None
    if kind is not None:
        return f"is {kind}, not a folder"
    if os.path.lexists(path):
        return "is a file, not a folder"
    return None if may_be_missing else "no such folder"


def read_user_file(
    path: str | Path,
    what: str,
    *,
    error: type[ImagesmithError] = ConfigError,
    hint: str,
    max_bytes: int = MAX_USER_FILE_BYTES,
) -> bytes:
    """The bytes of the regular file *path*, which the user named as *what* (``--nvidia-smi``, ``release
    index``, ``[paths] matrices``). A missing path, a folder, a FIFO, a socket or a device, a file larger than
    *max_bytes* and a path the OS refuses are each one *error* naming *what* and the path, with *hint* as the
    fix. Never blocks: the file is opened with ``O_NONBLOCK`` and checked with ``fstat`` before a byte is
    read (a FIFO given as a capture would otherwise wait for a writer forever)."""
    text = str(path)
    shown = text if len(text) <= 200 else text[:200] + "…"
    where = f"{what} {shown}" if what else shown
    if not text.strip():
        raise error(f"{what or 'the path'} is empty", hint=hint)
    try:
        fd = os.open(text, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise error(f"{where}: no such file", hint=hint) from None
    except IsADirectoryError:
        raise error(f"{where}: is a folder, not a file", hint=hint) from None
    except (OSError, ValueError) as exc:
        why = getattr(exc, "strerror", None) or exc.__class__.__name__
        raise error(f"{where}: cannot read it ({why})", hint=hint) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{where}: is {_kind(st.st_mode)}, not a regular file", hint=hint)
        if st.st_size > max_bytes:
            raise error(
                f"{where}: {st.st_size} bytes, more than the {max_bytes} bytes it may have", hint=hint
            )
        chunks: list[bytes] = []
        size = 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            size += len(chunk)
            if size > max_bytes:
                raise error(f"{where}: more than the {max_bytes} bytes it may have", hint=hint)
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise error(
            f"{where}: cannot read it ({exc.strerror or exc.__class__.__name__})", hint=hint
        ) from None
    finally:
        os.close(fd)


def resolved(path: str | Path) -> Path:
    """*path* made absolute with every symbolic link followed, like ``Path.resolve()`` but never raising:
    ``Path.resolve()`` raises ``RuntimeError("Symlink loop …")`` (a traceback) for a link that points at
    itself, where the caller's own check then names the loop (:func:`path_kind`). Use it on every path a user
    named."""
    return Path(os.path.realpath(path))


def is_regular_file(path: str | Path) -> bool:
    """True for an existing regular file; False for anything else, a FIFO included, and for a path the OS
    cannot even be asked about (too long, a NUL byte). Never blocks."""
    try:
        return stat.S_ISREG(Path(path).stat().st_mode)
    except (OSError, ValueError):
        return False


def _looks_utf16(data: bytes) -> bool:
    """A byte-order mark, or ASCII text in UTF-16 without one: NUL as every other byte of the first pairs
    and the bytes between them not NUL."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return True
    head = data[:64]
    if len(head) < 4:
        return False
    for zero, other in ((head[1::2], head[0::2]), (head[0::2], head[1::2])):
        if zero.count(0) >= len(zero) * 3 // 4 and other.count(0) <= len(other) // 4:
            return True
    return False


def decode_text(data: bytes, where: str, *, error: type[ImagesmithError] = ConfigError, hint: str) -> str:
    """*data* as UTF-8 text; a UTF-16 file (PowerShell's ``>`` writes one) and bytes that are not text at all
    (NUL bytes, invalid UTF-8) are each one *error* naming *where*."""
    if _looks_utf16(data):
        raise error(
            f"{where}: saved as UTF-16 (Windows PowerShell's `>` does that), not UTF-8 text",
            hint="save it as UTF-8: `iconv -f UTF-16 -t UTF-8 FILE > FILE.new`, or in PowerShell "
            "`… | Out-File -Encoding utf8 FILE`",
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(
            f"{where}: not UTF-8 text (byte {exc.start} is {data[exc.start : exc.start + 1]!r}): a binary "
            "or otherwise encoded file",
            hint=hint,
        ) from None
    if "\x00" in text:
        raise error(
            f"{where}: not text (a NUL byte at byte {data.index(0)}): a binary file, or a device such as "
            "/dev/zero",
            hint=hint,
        )
    return text


def parse_int(
    text: str,
    what: str,
    *,
    error: type[ImagesmithError] = ConfigError,
    hint: str,
    max_digits: int = MAX_INT_DIGITS,
) -> int:
    """*text* (ASCII digits, an optional sign) as an int; anything else, non-ASCII digits and more than
    *max_digits* digits included, is one *error* naming *what*. The length is checked before ``int()``."""
    value = text.strip() if isinstance(text, str) else ""
    digits = value.lstrip("+-")
    if len(digits) > max_digits and digits.isascii() and digits.isdigit():
        raise error(
            f"{what}: a number of {len(digits)} digits ({digits[:12]}…), more than any real value has "
            f"(at most {max_digits})",
            hint=hint,
        )
    if not _ASCII_INT.fullmatch(value):
        raise error(f"{what}: {value[:40]!r} is not a number (ASCII digits 0-9)", hint=hint)
    return int(value)


def is_digits(text: str) -> bool:
    """True for a non-empty run of ASCII digits 0-9 only. ``str.isdigit`` is also true for ``٣``, ``５`` and
    ``²`` (which ``int()`` then takes as 3 and 5, or refuses with a ValueError): never use it on what a user,
    a file, a registry or a host printed."""
    return text.isascii() and text.isdigit()


_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def is_decimal(text: str) -> bool:
    """True for a number written in ASCII decimal (``12``, ``0.5``, ``1e3``, a sign). ``float()`` also takes
    ``١٠``, ``1_0``, ``nan`` and ``inf``: test with this before it, on anything a user or a host wrote."""
    return isinstance(text, str) and _DECIMAL.fullmatch(text.strip()) is not None


def _long_digit_line(text: str) -> int | None:
    match = re.search(r"[0-9_]{4000,}", text)
    return text.count("\n", 0, match.start()) + 1 if match else None


def check_int_range(
    data: Any, source: str, *, error: type[ImagesmithError], hint: str, key: str = ""
) -> None:
    """Refuse any integer of *data* (a parsed TOML/JSON document) outside 64 bits, naming its dotted key."""
    if isinstance(data, bool):
        return
    if isinstance(data, int):
        if not INT64_MIN <= data <= INT64_MAX:
            digits = len(str(abs(data))) if data.bit_length() < 14000 else "thousands of"
            raise error(
                f"{source}: {key or 'a value'}: an integer of {digits} digits, outside the 64-bit range "
                "(TOML and imagesmith allow -2^63 … 2^63-1)",
                hint=hint,
            )
    elif isinstance(data, dict):
        for k, v in data.items():
            check_int_range(v, source, error=error, hint=hint, key=f"{key}.{k}" if key else str(k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            check_int_range(v, source, error=error, hint=hint, key=f"{key}[{i}]")


def loads_toml(
    text: str,
    source: str,
    *,
    error: type[ImagesmithError] = ConfigError,
    syntax_hint: str = "fix the TOML syntax at that line",
) -> dict[str, Any]:
    """``tomllib.loads`` for the user's file *source*: a syntax error, an integer past Python's digit limit
    and one outside TOML's 64 bits are each one *error* naming the file (and the line or key)."""
    try:
        data: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{source}: not valid TOML (TOML syntax error: {exc})", hint=syntax_hint) from None
    except RecursionError:  # arrays or inline tables nested thousands deep: tomllib recurses per level
        raise error(
            f"{source}: not valid TOML (arrays or inline tables nested deeper than a parser follows)",
            hint=syntax_hint,
        ) from None
    except ValueError:  # int() past sys.get_int_max_str_digits()
        line = _long_digit_line(text)
        raise error(
            f"{source}: {'line ' + str(line) + ': ' if line else ''}an integer of thousands of digits, "
            "outside the 64-bit range (TOML and imagesmith allow -2^63 … 2^63-1)",
            hint="write the real value there",
        ) from None
    check_int_range(data, source, error=error, hint="write the real value there")
    return data


#: JSON integers longer than this are refused while parsing (naming the document); shorter ones reach the
#: reader's own field checks, which name the field
MAX_JSON_INT_DIGITS: Final[int] = 1000


def _json_int(source: str, error: type[ImagesmithError], hint: str) -> Callable[[str], int]:
    def convert(text: str) -> int:
        return parse_int(
            text, f"{source}: an integer", error=error, hint=hint, max_digits=MAX_JSON_INT_DIGITS
        )

    return convert


def json_int_parser(
    source: str, *, error: type[ImagesmithError] = ConfigError, hint: str
) -> Callable[[str], int]:
    """``parse_int`` for :func:`json.loads`: an integer of more than :data:`MAX_JSON_INT_DIGITS` digits is
    one *error* naming *source*, before ``int()`` sees it (as :func:`loads_json` does)."""
    return _json_int(source, error, hint)


def loads_json(
    text: str | bytes,
    source: str,
    *,
    error: type[ImagesmithError] = ConfigError,
    hint: str,
) -> Any:
    """``json.loads`` for a document from *source* (a file, a URL, a registry): an integer of more than
    :data:`MAX_JSON_INT_DIGITS` digits is one *error* naming *source*, before ``int()`` sees it. Syntax errors
    are ``json.JSONDecodeError`` as usual (callers word them); arrays or objects nested deeper than the parser
    follows are one *error* naming *source*, not a RecursionError."""
    try:
        return json.loads(text, parse_int=_json_int(source, error, hint))
    except RecursionError:
        raise error(f"{source}: JSON nested deeper than a parser follows", hint=hint) from None


def read_user_text(
    path: str | Path,
    what: str,
    *,
    error: type[ImagesmithError] = ConfigError,
    hint: str,
    max_bytes: int = MAX_USER_FILE_BYTES,
) -> str:
    """:func:`read_user_file` decoded as UTF-8 (:func:`decode_text`); a leading byte-order mark is kept, for
    the reader to word."""
    data = read_user_file(path, what, error=error, hint=hint, max_bytes=max_bytes)
    if data.startswith(b"\xef\xbb\xbf"):
        return "\ufeff" + decode_text(data[3:], f"{what} {path}".strip(), error=error, hint=hint)
    return decode_text(data, f"{what} {path}".strip() if what else str(path), error=error, hint=hint)


def check_output_file(path: Path, flag: str) -> None:
    """A file a command writes when it ends (``build --summary``), checked when it starts: a folder, a path
    under a file, or a folder nothing can be written to would otherwise fail only after the work was done.
    Writes nothing that stays (a probe file in the nearest existing folder, removed at once)."""
    import tempfile

    def refuse(why: str) -> ConfigError:
        return ConfigError(
            f"{flag} {str(path)[:200]}: {why}",
            hint=f"give {flag} a file in a folder you can write",
            field=flag,
        )

    try:
        if path.is_dir():
            raise refuse("is a folder")
        if path.exists() and not is_regular_file(path):
            raise refuse("is not a regular file (a FIFO, a socket or a device): writing would block")
        folder = path.parent
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
        if not folder.is_dir():
            raise refuse(f"{folder} is not a folder")
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".imagesmith-probe-"):
            pass
    except OSError as exc:
        raise refuse(f"cannot write there ({exc.strerror or exc})") from None
