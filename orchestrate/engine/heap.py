"""A worker's heap kept to what it uses: glibc's mmap threshold fixed at its default (128 KiB), and
two malloc arenas for all threads.

glibc serves a large allocation (at least the threshold) from its own mapping, returned to the system
when freed, but by default it raises the threshold to the size of each such block freed, up to 32 MiB.
An engine run frees big short-lived blocks all the time (the agent's output is read a MiB at a time, the
raw log encodes each read, the store writes batches of it), so after the first one they all come from
the heap instead, between the small objects that live on; the heap then grows in holes it cannot give
back, the longer the run the more.  And each thread that allocates gets an arena of its own, up to 8
per core (the store's writer, the threads every store call runs in): what one frees the others cannot
reuse.  What Python and the heap hold in use (tracemalloc, mallinfo2) is the same either way.

Measured (bench/README.md, round 24): an embedded engine run of fake_flood (big entries, a live watcher
of the task in the same process), its queues already bounded: peak RSS 164-168 MB for 10,000 entries and
200-207 MB for 30,000 with glibc's defaults, 109 and 112-118 MB with these two settings.  The price:
each large block is a fresh mapping, faulted in page by page (6x the minor faults, about 10 % more CPU
in this flood, which is all large reads; an agent's usual output costs nothing more).  A 4 MiB
threshold costs a third of those faults and stays flat too, some 10 MB higher (the reads of a MiB then
come from the heap).

Set once per process, when its first engine is made (or its first run starts): the arena bound only
holds fully if no other thread has allocated before.  A board embedding the engine gets it too (it only
changes where blocks come from).  Not on other C libraries (no ``mallopt``), and neither setting when
glibc's own environment variable for it is set (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_ARENA_MAX``: the
user's choice, already applied).
"""

from __future__ import annotations

import os

__all__ = ["steady_heap"]

# mallopt's parameters (malloc.h) and the values set, with the environment variable that overrides each.
_SETTINGS = (
    (-3, 128 * 1024, "MALLOC_MMAP_THRESHOLD_"),  # M_MMAP_THRESHOLD: glibc's default, set so it stays
    (-8, 2, "MALLOC_ARENA_MAX"),  # M_ARENA_MAX
)
_state: list[int] = []  # [how many settings took], once tried


def steady_heap() -> int:
    """Apply the settings (once per process); how many took (0 where there is no glibc)."""
    if not _state:
        _state.append(_apply())
    return _state[0]


def _apply() -> int:
    if not _glibc():
        return 0
    import ctypes  # (here: a process that never runs an engine never loads it)

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return 0
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return sum(bool(mallopt(param, value)) for param, value, env in _SETTINGS if env not in os.environ)


def _glibc() -> bool:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") is not None
    except (ValueError, OSError):  # not a name this system knows: not glibc
        return False
