"""Memory of this process and of its machine: resident set now and at peak, the memory a rank
may use (MemAvailable, cgroup limit), and handing freed memory back to the system. Rank-local.

Numbers come from ``/proc`` (Linux); elsewhere the functions fall back to ``getrusage`` and
``sysconf`` or report 0 / ``None`` where nothing is known.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from pathlib import Path

from shardgnn.comm import peak_rss_bytes

__all__ = ["rss_bytes", "peak_rss_bytes", "mem_available", "cgroup_headroom",
           "usable_bytes", "return_freed_memory"]

#: glibc's mallopt parameter numbers.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: Allocations of at least this many bytes are mapped (and unmapped when freed) once
#: :func:`return_freed_memory` ran.
MMAP_THRESHOLD = 256 << 10

#: Where the cgroup file systems are mounted.
CGROUP_ROOT = Path("/sys/fs/cgroup")

_released = False


def _status(key: str) -> int | None:
    """A ``kB`` field of /proc/self/status in bytes, None where unreadable."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def rss_bytes() -> int:
    """Resident set size of this process now (VmRSS; the peak where that is unreadable)."""
    now = _status("VmRSS")
    return now if now is not None else peak_rss_bytes()


def mem_available() -> int:
    """Bytes of memory available on this machine (MemAvailable, else free pages)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def _cgroup_dirs() -> list[Path]:
    """This process's cgroup folders holding memory limits: the v2 one (``/sys/fs/cgroup``, or
    ``/sys/fs/cgroup/unified`` on hybrid systems) and the v1 memory controller's."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        rel = parts[2].lstrip("/")
        if parts[0] == "0" and parts[1] == "":
            root = CGROUP_ROOT
            if not (root / "cgroup.controllers").exists():
                root = root / "unified"
            out.append(root / rel)
        elif "memory" in parts[1].split(","):
            out.append(CGROUP_ROOT / "memory" / rel)
    return out


def cgroup_headroom() -> int | None:
    """Bytes this process's cgroups may still take (limit minus usage, the tightest over its
    cgroups and their parents), None without a limit."""
    best: int | None = None
    for d in _cgroup_dirs():
        while d != d.parent and CGROUP_ROOT in d.parents:
            for limit, usage in (("memory.max", "memory.current"),
                                 ("memory.limit_in_bytes", "memory.usage_in_bytes")):
                try:
                    lim = (d / limit).read_text().strip()
                    use = int((d / usage).read_text().strip())
                except (OSError, ValueError):
                    continue
                if lim != "max" and int(lim) < 1 << 60:
                    room = max(0, int(lim) - use)
                    best = room if best is None else min(best, room)
            d = d.parent
    return best


def usable_bytes() -> int:
    """Bytes this process could still take on its machine: MemAvailable, or less where a
    cgroup limit leaves less."""
    room = cgroup_headroom()
    avail = mem_available()
    return avail if room is None else min(avail, room)


def return_freed_memory(threshold: int = MMAP_THRESHOLD) -> bool:
    """Make glibc map every allocation of at least ``threshold`` bytes on its own (NumPy's large
    arrays), so that freeing it returns the memory to the system at once, and trim the heap.
    By default glibc raises that threshold up to 32 MiB after the first large array is freed,
    and freed arrays below it stay in the heap: the resident set then keeps every pass's
    temporaries. Returns whether it was applied (glibc only; once per process)."""
    global _released
    if _released:
        return True
    name = ctypes.util.find_library("c")
    if not sys.platform.startswith("linux") or not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        ok = libc.mallopt(_M_MMAP_THRESHOLD, int(threshold)) == 1
        ok = ok and libc.mallopt(_M_TRIM_THRESHOLD, int(2 * threshold)) == 1
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        return False
    _released = ok
    return ok
