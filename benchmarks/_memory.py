"""Memory measurement for the benchmarks (not package API): the peak resident set of one step.

``ru_maxrss`` is the peak of the whole process, which loading the data may
already have set.  :class:`PeakMemory` resets the kernel's high-water mark
(``VmHWM``, through ``/proc/self/clear_refs`` on Linux) when the step starts,
so that the peak it reports is the step's own; where that is impossible it
falls back to ``ru_maxrss`` and says so (``reset`` is False).
"""

from __future__ import annotations

import resource

__all__ = ["PeakMemory", "gib", "peak_rss_bytes", "reset_peak", "status_bytes"]


def peak_rss_bytes() -> int:
    """``ru_maxrss``: the largest resident set of the process so far, in bytes."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def status_bytes(field: str) -> int | None:
    """``VmRSS`` (resident now) or ``VmHWM`` (its peak since the last reset) of /proc/self/status, in bytes."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def gib(**sizes) -> dict:
    """``{name + "_gib": bytes / 2**30}`` of the byte counts ``sizes``: a record's memory figures."""
    return {f"{name}_gib": size / 2**30 for name, size in sizes.items()}


def reset_peak() -> bool:
    """Reset ``VmHWM`` to the current resident set (Linux); whether it could."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


class PeakMemory:
    """``with PeakMemory() as m: step()``, then ``m.before``, ``m.peak`` and ``m.above`` (bytes).

    ``before`` is the resident set when the step starts, ``peak`` the largest
    during it, ``above = peak - before`` what the step added.
    """

    def __enter__(self):
        self.before = status_bytes("VmRSS") or peak_rss_bytes()
        self.reset = reset_peak()
        return self

    def __exit__(self, *exc):
        self.peak = (status_bytes("VmHWM") if self.reset else None) or peak_rss_bytes()
        self.above = self.peak - self.before
        return False
