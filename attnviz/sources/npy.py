"""NumPy's files of attention read within their decoded budget: an ``.npy``, or the attention and tokens of an ``.npz``.

An ``.npz`` is a zip of ``.npy`` members, deflated: 600 KB can unpack into 600 MB. So a member is weighed by what it
unpacks to, as the zip directory declares it, before a byte of it is inflated, and read only as far as that: the
header's shape must be exactly what the directory declares, and inflating stops there (a directory that understates
the member fails its checksum; one that overstates it ends early), so no header, of the zip or of the array, is taken
on trust. Tokens are weighed before they are decoded too (:data:`~attnviz.files.MAX_TOKEN`). The array is read once,
into its own memory, in the type it was saved in (float32 stays float32): what a map costs is its own size.
"""

from __future__ import annotations

import math
import os
import zipfile
import zlib
from typing import IO

import numpy as np

from ..errors import AttnvizError, printable
from ..files import MAX_TOKEN, MAX_TOKENS_TEXT, check_tokens
from ..resources import ensure_fits, human_bytes

MAX_ATTENTION_ARRAY = 2**36  # 64 GiB of .npy or .npz: the memory check (ensure_fits) refuses most before that
MAX_TOKENS_MEMBER = 4 * MAX_TOKENS_TEXT  # bytes: NumPy keeps 4 a character, each token as long as the longest
ARRAY_KEYS = ("attentions", "attention", "weights", "pattern", "att", "attn")
CHUNK = 2**20  # bytes inflated (or read) at a time into the array: zipfile holds a few of them while it reads one


def read_numpy(stream: IO[bytes], where: str, suffix: str) -> tuple[np.ndarray, list[str] | None]:
    """The array of an .npy file, or the attention (and tokens, if it has them) of an .npz, from ``stream``."""
    try:
        if suffix == ".npy":
            return _array(stream, os.fstat(stream.fileno()).st_size, where), None
        with zipfile.ZipFile(stream) as archive:
            members = {_key(info.filename): info for info in archive.infolist()}
            attention = members[_attention_key(members, where)]
            named = members.get("tokens")
            _weigh(attention, where, MAX_ATTENTION_ARRAY, "an attention array")  # both, before either is inflated
            if named is None:
                return _member(archive, attention, where), None
            _weigh(named, where, MAX_TOKENS_MEMBER, "tokens")
            tokens = _member(archive, named, where, tokens=True)
            array = _member(archive, attention, where)
    except _unreadable_npy(RuntimeError) as err:  # zipfile's RuntimeError: a member that is encrypted
        raise AttnvizError(f"{where}: not a readable {suffix} file ({_npy_problem(err)})") from None
    if tokens.ndim != 1:
        raise AttnvizError(f"{where}: 'tokens' is of shape {tuple(tokens.shape)}, not a list of strings")
    listed = [t.decode("utf-8", "replace") if isinstance(t, bytes) else str(t) for t in tokens.tolist()]
    del tokens
    check_tokens(listed, where)
    return array, listed


def _key(filename: str) -> str:
    """A member's name as ``np.load`` gives it: without ``.npy``."""
    return filename.removesuffix(".npy")


def _attention_key(members: dict[str, zipfile.ZipInfo], where: str) -> str:
    """Which member holds the attention: one of ARRAY_KEYS, or the one member besides the tokens."""
    name = next((k for k in ARRAY_KEYS if k in members), None)
    candidates = [k for k in members if k != "tokens"]
    if name is None and len(candidates) == 1:
        name = candidates[0]
    if name is None:
        raise AttnvizError(
            f"{where}: which array holds the attention? found {printable(', '.join(members)) or 'none'}; "
            f"name it one of {', '.join(ARRAY_KEYS)}"
        )
    return name


def _weigh(info: zipfile.ZipInfo, where: str, limit: int, what: str) -> None:
    """Refuse a member the zip directory declares to unpack past ``limit`` bytes, before it is inflated."""
    if info.file_size > limit:
        raise AttnvizError(
            f"{where}: {printable(info.filename)}: unpacks to {human_bytes(info.file_size)} "
            f"({human_bytes(info.compress_size)} packed), more than the {human_bytes(limit)} attnviz unpacks of {what}"
        )


def _member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, where: str, *, tokens: bool = False) -> np.ndarray:
    """One member (weighed already), held to exactly the size the zip directory declares: its header's shape must
    be that, and zipfile inflates no further than it, checking the CRC at its end (a directory that understates
    the member fails the check; one that overstates it ends early)."""
    with archive.open(info) as member:
        return _array(member, info.file_size, f"{where}: {printable(info.filename)}", exact=True, tokens=tokens)


def _array(stream: IO[bytes], size: int, where: str, *, exact: bool = False, tokens: bool = False) -> np.ndarray:
    """The array of a .npy stream of ``size`` bytes (``exact``: a zip member, which must be exactly its header's
    shape times its item size, so a small deflated member cannot unpack into gigabytes its header hides).

    Its header is checked before anything is allocated: it may claim no more than the stream holds, no Python
    objects, and (``tokens``) no token longer than MAX_TOKEN."""
    from numpy.lib import format as npy

    try:
        version = npy.read_magic(stream)
        reader = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
        shape, fortran, dtype = reader(stream)
    except _unreadable_npy() as err:
        raise AttnvizError(f"{where}: not a readable .npy array ({_npy_problem(err)})") from None
    if dtype.hasobject:
        raise AttnvizError(f"{where}: holds Python objects, which attnviz never loads (they could run code)")
    needed = math.prod(shape) * dtype.itemsize
    data = size - stream.tell()
    if needed > data or (exact and needed != data):
        raise AttnvizError(
            f"{where}: its header claims a {tuple(shape)} {dtype} array ({human_bytes(needed)}), "
            f"but the file holds {human_bytes(data)}"
        )
    if tokens and dtype.kind in "US":  # NumPy gives each token the room of the longest: 4 bytes a character (U)
        room, unit = (dtype.itemsize // 4, "characters") if dtype.kind == "U" else (dtype.itemsize, "bytes")
        if room > (MAX_TOKEN if dtype.kind == "U" else 4 * MAX_TOKEN):  # UTF-8: at most 4 bytes a character
            raise AttnvizError(
                f"{where}: holds tokens of up to {room:,} {unit}; attnviz reads tokens of at most {MAX_TOKEN:,} "
                "characters"
            )
    count = math.prod(shape)
    if tokens:  # as Python strings: each about its characters and an object's 64 bytes
        later = needed + 64 * count
    else:
        later = 0 if weights_dtype(dtype) == dtype else count * weights_dtype(dtype).itemsize
    ensure_fits(needed + later, f"loading {where}", "use a smaller file")
    return _filled(stream, shape, fortran, dtype, needed, where)


def weights_dtype(dtype: np.dtype) -> np.dtype:
    """The type weights are kept in: float64 for a file's of 8 bytes or more, float32 for the rest (float16,
    integers, true/false); a file's float32 or float64 (in the machine's byte order) is kept as it is, not copied."""
    return np.dtype(np.float64 if dtype.kind == "f" and dtype.itemsize >= 8 else np.float32)


def _filled(
    stream: IO[bytes], shape: tuple[int, ...], fortran: bool, dtype: np.dtype, needed: int, where: str
) -> np.ndarray:
    """The array's ``needed`` bytes read from ``stream`` straight into its own memory, CHUNK at a time: no copy of
    the whole (NumPy's reader of a stream that is not a file reads each chunk, then copies it)."""
    array = np.ndarray(math.prod(shape), dtype=dtype)  # np.empty mishandles a zero-width string type
    if needed:
        memory = array.view(np.uint8).data
        done = 0
        while done < needed:
            read = stream.readinto(memory[done : done + CHUNK])  # type: ignore[attr-defined]
            if not read:
                raise AttnvizError(f"{where}: ends after {done:,} of the {needed:,} bytes its header declares")
            done += read
    if fortran:
        return array.reshape(shape[::-1]).transpose()
    return array.reshape(shape)


def _unreadable_npy(*more: type[BaseException]) -> tuple[type[BaseException], ...]:
    """What NumPy's reader raises on a damaged .npy header or archive (matched only once one is raised): the
    header parsers' errors (:func:`_header_parsers_errors`), the archive's and the file's own."""
    return (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error, NotImplementedError,
            *_header_parsers_errors(), *more)  # fmt: skip


def _header_parsers_errors() -> tuple[type[BaseException], ...]:
    """NumPy reads a .npy header as Python literals (ast: SyntaxError, RecursionError when nested deep) and, failing
    that, tokenises it again (tokenize.TokenError)."""
    import tokenize

    return SyntaxError, RecursionError, tokenize.TokenError


def _npy_problem(err: BaseException) -> str:
    """What :func:`_unreadable_npy` caught, in a few words (a header that is no Python literal: those)."""
    return "its header does not parse" if isinstance(err, _header_parsers_errors()) else printable(str(err))
