"""The kernels of blocks.c built with the machine's C compiler at their first use and loaded with ctypes. Imported
only by :mod:`.kernels`, only when a generation or a long text's whole matrices ask for them.

Built once for this CPU (``-march=native``: its widest vectors) and kept in the user's cache folder
($XDG_CACHE_HOME/attnviz, else ~/.cache/attnviz) under a name made of the source's hash, the compiler's identity
(path, size, time) and the CPU's flags: a changed source, compiler or machine builds anew (removing the others),
anything else loads what is there (a few milliseconds). The library is written under a temporary name and renamed
into place, so two processes building at once never load half a file; where the cache folder cannot be written,
it is built in a temporary folder for this process alone. Where there is no compiler, or the build fails, there
are no kernels: NumPy multiplies (:mod:`.kernels` says so).

ctypes releases the GIL for each call, so attnviz's threads share a matrix's rows (:func:`.weights.by_rows`).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

SOURCE = Path(__file__).with_name("blocks.c")
FLAGS = ("-O3", "-shared", "-fPIC", "-pthread", "-ffp-contract=fast")
NATIVE = "-march=native"  # this CPU's vectors; a compiler that refuses it builds without
COMPILE_SECONDS = 120


class Unavailable(Exception):
    """Why the kernels cannot run here, in words for ``--verbose``."""


def compiler() -> str:
    """The C compiler's path: $CC, else ``cc``."""
    name = os.environ.get("CC", "").strip() or "cc"
    found = shutil.which(name)
    if found is None:
        raise Unavailable(f"no C compiler ({name} not found)")
    return found


def cache_folder() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "attnviz"


def cpu_flags() -> str:
    """What the compiled code may use: /proc/cpuinfo's flags where there is one, else the platform's names."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            for line in info:
                if line.startswith(("flags", "Features")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return f"{platform.machine()} {platform.processor()}"


def library_name(cc: str) -> str:
    stat = os.stat(cc)
    identity = "\n".join([SOURCE.read_text(encoding="utf-8"), cc, str(stat.st_size), str(stat.st_mtime_ns),
                          cpu_flags(), " ".join(FLAGS)])  # fmt: skip
    return f"blocks-{hashlib.sha256(identity.encode()).hexdigest()[:20]}.so"


def build(cc: str, target: Path) -> None:
    """Compile blocks.c into ``target`` (for this CPU where the compiler can, else for any)."""
    for flags in ((*FLAGS, NATIVE), FLAGS):
        try:
            run = subprocess.run([cc, *flags, "-o", str(target), str(SOURCE)], capture_output=True,
                                 timeout=COMPILE_SECONDS, stdin=subprocess.DEVNULL)  # fmt: skip
        except (OSError, subprocess.TimeoutExpired) as err:
            raise Unavailable(f"the C compiler {cc} did not run ({type(err).__name__})") from None
        if run.returncode == 0:
            return
    first = (run.stderr.decode(errors="replace").strip().splitlines() or ["no message"])[0][:120]
    raise Unavailable(f"the C compiler {cc} failed: {first}")


def load() -> tuple[ctypes.CDLL, str]:
    """The loaded library and the compiler that built it; :class:`Unavailable` where it cannot be had."""
    cc = compiler()
    if not SOURCE.is_file():
        raise Unavailable("the kernels' source is missing from the installation")
    name = library_name(cc)
    folder = cache_folder()
    path = folder / name
    if not path.is_file():
        try:
            folder.mkdir(parents=True, exist_ok=True)
            handle, partial = tempfile.mkstemp(dir=folder, prefix=".building-", suffix=".so")
            os.close(handle)
        except OSError:  # an unwritable cache: built for this process alone
            return _load_once(cc, name)
        try:
            build(cc, Path(partial))
            os.replace(partial, path)
        finally:
            if os.path.exists(partial):
                os.unlink(partial)
        _forget_others(folder, name)
    return _declared(ctypes.CDLL(str(path))), cc


def _forget_others(folder: Path, kept: str) -> None:
    """Libraries of other sources, compilers or CPUs left by earlier versions: one is kept, not one per upgrade (a
    process that loaded one keeps its copy in memory)."""
    for old in folder.glob("blocks-*.so"):
        if old.name != kept:
            try:
                old.unlink()
            except OSError:
                pass


def _load_once(cc: str, name: str) -> tuple[ctypes.CDLL, str]:
    with tempfile.TemporaryDirectory(prefix="attnviz-") as folder:
        path = Path(folder) / name
        build(cc, path)
        library = ctypes.CDLL(str(path))  # loaded, the file may go
    return _declared(library), cc


def _declared(library: ctypes.CDLL) -> ctypes.CDLL:
    pointer, size = ctypes.c_void_p, ctypes.c_long
    library.attnviz_times.argtypes = [ctypes.c_int, pointer, size, size, pointer, pointer, size, size, size,
                                      pointer, pointer, size, ctypes.c_int]  # fmt: skip
    library.attnviz_times.restype = ctypes.c_int
    library.attnviz_dequantise.argtypes = [ctypes.c_int, pointer, size, size, size, pointer, pointer]
    library.attnviz_dequantise.restype = ctypes.c_int
    return library
