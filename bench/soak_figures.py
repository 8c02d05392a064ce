"""The soak's figures (:mod:`bench.soak`): each long-lived process's growth from its
samples, the batch rate, the report's lines, and the tracemalloc diffs per process."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROLES = ("driver", "jvm", "sink runner", "source runner", "daemon", "worker", "python")


@dataclass
class Process:
    """One process of the job as sampled: its role, command and RSS series (MB)."""

    pid: int
    role: str
    command: str
    samples: list[tuple[float, float]] = field(default_factory=list)  # (minute, MB)


def tracemalloc_top(folder: Path, processes: dict[int, Process], top: int) -> dict[str, Any]:
    """Per process: the lines whose allocations grew most between its two snapshots."""
    import tracemalloc

    result: dict[str, Any] = {}
    for pid, proc in processes.items():
        first, last = folder / f"{pid}-1.tm", folder / f"{pid}-2.tm"
        if not (first.exists() and last.exists()):
            continue
        old = tracemalloc.Snapshot.load(str(first))
        new = tracemalloc.Snapshot.load(str(last))
        stats = new.compare_to(old, "lineno")
        result[f"{proc.role} {pid}"] = {
            "traced_mb": [
                round(sum(s.size for s in old.statistics("filename")) / 2**20, 1),
                round(sum(s.size for s in new.statistics("filename")) / 2**20, 1),
            ],
            "top": [
                {
                    "where": str(s.traceback).strip(),
                    "grew_kb": round(s.size_diff / 1024, 1),
                    "count_diff": s.count_diff,
                }
                for s in stats[:top]
            ],
        }
    return result


def _at(samples: Sequence[tuple[float, float]], minute: float) -> tuple[float, float] | None:
    after = [s for s in samples if s[0] >= minute]
    return after[0] if after else None


def _median_in(
    samples: Sequence[tuple[float, float]], start: float, end: float
) -> tuple[float, float] | None:
    """The middle minute and the median value of the samples in ``[start, end]``: a
    process's RSS swings by tens of MB within a minute (a Delta checkpoint, a batch's
    buffers), so one sample is no figure."""
    inside = sorted(v for t, v in samples if start <= t <= end)
    if not inside:
        return None
    return (start + end) / 2, inside[len(inside) // 2]


def figures_of(
    *,
    processes: dict[int, Process],
    versions: list[tuple[float, int]],
    warmup: float,
    rate: int,
    minutes: float,
    once: dict[str, Any],
    tracemalloc: dict[str, Any],
) -> dict[str, Any]:
    """Each long-lived process's growth from the minute after the warm-up to the last
    minute of the run (the median of the samples of each), and the batch rate."""
    end = max(t for t, _ in versions)
    windows = (warmup, warmup + 1), (end - 1, end)
    commits = [_median_in([(t, float(v)) for t, v in versions], *w) for w in windows]
    rows = []
    for proc in processes.values():
        first, last = (_median_in(proc.samples, *w) for w in windows)
        if first is None or last is None or proc.samples[0][0] > warmup:
            continue  # not alive across the measured span: not long-lived
        span = last[0] - first[0]
        made = commits[1][1] - commits[0][1] if commits[0] and commits[1] else 0
        grew = last[1] - first[1]
        rows.append(
            {
                "pid": proc.pid,
                "role": proc.role,
                "command": proc.command[:160],
                "mb_at_warmup": first[1],
                "mb_at_end": last[1],
                "minutes": round(span, 2),
                "growth_pct": round(100 * grew / first[1], 1) if first[1] else None,
                "mb_per_minute": round(grew / span, 2) if span > 0 else None,
                "kb_per_commit": round(grew * 1024 / made, 2) if made else None,
                "samples": proc.samples,
            }
        )
    rows.sort(key=lambda r: (ROLES.index(r["role"]) if r["role"] in ROLES else 99, r["pid"]))
    return {
        "rate": rate,
        "minutes": minutes,
        "warmup": warmup,
        "load_average": os.getloadavg(),
        "versions": versions,
        "batches_per_minute": _batch_rates(versions, warmup),
        "processes": rows,
        "once": once,
        "tracemalloc": tracemalloc,
    }


def _batch_rates(versions: list[tuple[float, int]], warmup: float) -> dict[str, float | None]:
    def per_minute(a: float, b: float) -> float | None:
        first, last = _at(versions, a), _at(versions, b)
        if first is None or last is None or last[0] <= first[0]:
            return None
        return round((last[1] - first[1]) / (last[0] - first[0]), 1)

    end = versions[-1][0]
    return {"after_warmup": per_minute(warmup, warmup + 1), "at_end": per_minute(end - 1, end)}


def _load(figures: dict[str, Any]) -> str:
    """The 1-minute load average at the producer's start (when known) and at the end."""
    start = figures.get("load_average_at_start")
    end = f"{figures['load_average'][0]:.1f}"
    return f"{start[0]:.1f} at the start, {end} at the end" if start else end


def _figure(value: float | None, spec: str) -> str:
    """``value`` formatted by ``spec``, or ``-`` right-aligned to its width where a run too
    short had none (a span of no time, no commits between the two windows)."""
    if value is None:
        return format("-", ">" + spec.partition(".")[0])
    return format(value, ">" + spec)


def summary_lines(figures: dict[str, Any]) -> list[str]:
    lines = [
        f"soak: {figures['rate']} records/s for {figures['minutes']} min, warm-up "
        f"{figures['warmup']} min, load average {_load(figures)}; "
        f"batches/min {figures['batches_per_minute']}; every record once: "
        f"{figures['once']}",
        f"{'process':<14} {'pid':>7} {'MB@warm':>8} {'MB@end':>8} {'growth':>7} "
        f"{'MB/min':>7} {'KB/commit':>9}",
    ]
    for row in figures["processes"]:
        lines.append(
            f"{row['role']:<14} {row['pid']:>7} {_figure(row['mb_at_warmup'], '8.1f')} "
            f"{_figure(row['mb_at_end'], '8.1f')} {_figure(row['growth_pct'], '6.1f')}% "
            f"{_figure(row['mb_per_minute'], '7.2f')} {_figure(row['kb_per_commit'], '9')}"
        )
    end = int(max(t for t, _ in figures["versions"]))
    lines.append("by minute (the median of its samples, MB), and the table's versions:")
    for row in figures["processes"]:
        if row["role"] in ("daemon", "worker") and abs(row["growth_pct"] or 0) < 2:
            continue  # the many small flat ones
        medians = [_median_in(row["samples"], m, m + 1) for m in range(end)]
        lines.append(
            f"    {row['role']} {row['pid']}: "
            + " ".join(f"{m[1]:.0f}" if m else "-" for m in medians)
        )
    versions = [(t, float(v)) for t, v in figures["versions"]]
    lines.append(
        "    versions: "
        + " ".join(
            f"{m[1]:.0f}" if (m := _median_in(versions, i, i + 1)) else "-" for i in range(end)
        )
    )
    for name, found in figures["tracemalloc"].items():
        lines.append(f"tracemalloc {name}: traced {found['traced_mb']} MB; grew most:")
        for entry in found["top"][:8]:
            lines.append(
                f"    {entry['grew_kb']:>9.1f} KB {entry['count_diff']:>7} {entry['where']}"
            )
    return lines


def reloaded(old: dict[str, Any]) -> dict[str, Any]:
    """The figures of an earlier run's ``--json``, computed again from its samples."""
    processes = {
        p["pid"]: Process(pid=p["pid"], role=p["role"], command=p["command"])
        for p in old["processes"]
    }
    for p in old["processes"]:
        processes[p["pid"]].samples = [(s[0], s[1]) for s in p["samples"]]
    figures = figures_of(
        processes=processes,
        versions=[(v[0], v[1]) for v in old["versions"]],
        warmup=old["warmup"],
        rate=old["rate"],
        minutes=old["minutes"],
        once=old["once"],
        tracemalloc=old["tracemalloc"],
    )
    figures["load_average"] = old["load_average"]
    if "load_average_at_start" in old:
        figures["load_average_at_start"] = old["load_average_at_start"]
    return figures
