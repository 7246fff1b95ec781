"""How much memory a request needs, checked against what the machine has, before allocating."""

from __future__ import annotations

import os

from .errors import AttnvizError, quoted


def available_memory() -> int | None:
    """Bytes that can still be allocated: the kernel's MemAvailable (or physical memory), and no more
    than the address space a limit (``ulimit -v``, prlimit --as) leaves this process."""
    system = _system_memory()
    room = _address_space_left()
    if system is None or room is None:
        return system if room is None else room
    return min(system, room)


def _address_space_left() -> int | None:
    try:
        import resource

        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (ImportError, OSError, ValueError):
        return None
    if limit == resource.RLIM_INFINITY:
        return None
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            used = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        used = 0
    return max(0, limit - used)


def _system_memory() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def keep_freed_memory() -> None:
    """Have the C library keep the blocks a computation frees for the next ones, rather than give each back to
    the system and take it again. A long text's every-head view allocates and frees blocks of megabytes (a block
    of scores, a product's rows) thousands of times; glibc gave many back and the kernel zeroed each again when
    it was taken: 11 of the 66 s of CPU of SmolLM2's every head at 8,000 tokens, and a fifth of its time. Blocks
    under 64 MiB now come from the heap and up to 256 MiB freed stay there. The cost is peak memory: 15 MiB more
    there, 150 MiB more (1.26 GB) for generate's 3,000-token prompt; a trim at 64 MiB kept the peaks and half the gain.
    Called by the command line only, whose process ends with its command: a program importing attnviz keeps its
    own allocator's settings. glibc only (mallopt); elsewhere nothing changes."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(-3, 64 * 2**20)  # M_MMAP_THRESHOLD: blocks under it from the heap, not a mapping of their own
    mallopt(-1, 256 * 2**20)  # M_TRIM_THRESHOLD: freed memory at the heap's top kept up to this


def memory_budget() -> int | None:
    """Bytes attnviz may keep for speed (weights' pages between a generation's steps): ``ATTNVIZ_MEMORY`` (a
    number of bytes, or with K, M or G), else a quarter of :func:`available_memory`; None when neither is known."""
    given = os.environ.get("ATTNVIZ_MEMORY", "").strip()
    if given:
        units = {"K": 2**10, "M": 2**20, "G": 2**30}
        number, unit = (given[:-1], units[given[-1].upper()]) if given[-1].upper() in units else (given, 1)
        try:
            value = float(number)
        except ValueError:
            value = -1.0
        if not 0 <= value * unit < 2**63:
            raise AttnvizError(f"ATTNVIZ_MEMORY must be a number of bytes (or with K, M or G), got {quoted(given, 40)}")
        return int(value * unit)
    available = available_memory()
    return None if available is None else available // 4


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KiB'."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def ensure_fits(needed: int, what: str, hint: str) -> None:
    """Refuse, with the numbers and a way out, a request that would not fit in memory."""
    available = available_memory()
    if available is not None and needed > available:
        raise AttnvizError(
            f"{what} needs about {human_bytes(needed)} of memory but only {human_bytes(available)} is available; {hint}"
        )
