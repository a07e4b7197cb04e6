"""Which cells ran beside which: the runner's view of contention between cells of one sweep.

Every record's ``timing`` carries the node (host name) it ran on and its wall-clock span (``start``/``end``,
epoch seconds) and, for a cell that was timed, its timing phase (``timed_start``/``timed_end``). A cell whose
timing phase overlapped another cell of the sweep on the same node shared that node's cores, memory bandwidth
and caches while timed: ``timing.shared_node`` is true and its speedup is not a claim. Under
``measure.exclusive`` the timing phases of one node are serialised (a lock), so only another cell's timing
phase counts: loading beside it is allowed.
"""

from __future__ import annotations

from typing import Any


def span(record: dict[str, Any]) -> dict[str, Any] | None:
    """A record's node and times, or None when it has no node and span (a cell that never ran)."""
    timing = record.get("timing") or {}
    if not timing.get("node") or timing.get("start") is None or timing.get("end") is None:
        return None
    return {
        "key": f"{record['model']}/{record['variant']}",
        "node": timing["node"],
        "start": timing["start"],
        "end": timing["end"],
        "timed_start": timing.get("timed_start"),
        "timed_end": timing.get("timed_end"),
    }


def running_spans(started: dict[str, tuple[str, float]], finished: set[str]) -> list[dict[str, Any]]:
    """Spans of the cells that reported their start and have no record yet: still running (no end)."""
    return [
        {"key": key, "node": node, "start": when, "end": None, "timed_start": None, "timed_end": None}
        for key, (node, when) in started.items()
        if key not in finished
    ]


def _overlaps(start: float, end: float | None, low: float, high: float) -> bool:
    return start < high and (end is None or end > low)


def attach_overlap(record: dict[str, Any], others: list[dict[str, Any]]) -> None:
    """``timing.overlapped``: the cells (model/variant) whose span overlapped this cell's on its node;
    ``timing.shared_node``: whether one of them ran during its timing phase (``shared_with``: which)."""
    mine = span(record)
    if mine is None:
        return
    timing = record["timing"]
    beside = [o for o in others if o["key"] != mine["key"] and o["node"] == mine["node"]]
    overlapped = [o["key"] for o in beside if _overlaps(o["start"], o["end"], mine["start"], mine["end"])]
    timing["overlapped"] = sorted(overlapped)
    if mine["timed_start"] is None or mine["timed_end"] is None:
        return  # never timed: nothing to contaminate
    low, high = mine["timed_start"], mine["timed_end"]
    if timing.get("exclusive"):  # only another timing phase counts (a running cell's is behind the lock)
        sharing = [
            o["key"]
            for o in beside
            if o["timed_start"] is not None and _overlaps(o["timed_start"], o["timed_end"], low, high)
        ]
    else:
        sharing = [o["key"] for o in beside if _overlaps(o["start"], o["end"], low, high)]
    timing["shared_node"] = bool(sharing)
    timing["shared_with"] = sorted(sharing)


def shared_reason(record: dict[str, Any] | None) -> str | None:
    """Why a cell's timings cannot back a speed claim because it shared its node while timed, or None."""
    timing = (record or {}).get("timing") or {}
    if not timing.get("shared_node"):
        return None
    others = ", ".join(timing.get("shared_with") or [])
    return (
        f"timed while other cells ran on its node {timing.get('node')} ({others}): "
        "set measure.exclusive: true to serialise timing per node"
    )


def placements(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Where the cells ran: one entry per (node, executor, torch threads, device) with its cell count."""
    places: dict[tuple[Any, ...], int] = {}
    for record in records:
        timing = record.get("timing") or {}
        if timing.get("node"):
            device = timing.get("device") or record.get("device")
            place = (timing["node"], timing.get("executor"), timing.get("threads"), device)
            places[place] = places.get(place, 0) + 1
    return [
        {"node": node, "executor": executor, "threads": threads, "device": device, "cells": count}
        for (node, executor, threads, device), count in places.items()
    ]
