"""Step caching, what every cache shares: reuse of transformer work across denoising steps (lossy).

The pieces the cache features share: the roofline exemption (``SKIPS_WORK``), the engagement verdicts (cached
steps per run, ``cached_steps_verdict``; block work skipped per run, ``skipped_work_verdict`` over the
counts of ``accel.features.work``) and what a cache asks of a pipeline (``runs_cfg_as_separate_calls``).
The caches themselves:

- ``cache_dit`` in ``cache_dit.py``: Cache-DiT's DBCache, with the TaylorSeer calibrator and SCM step masks.
- diffusers' hooks in ``diffusers_cache.py``: ``first_block_cache``, ``mag_cache``, ``taylorseer_cache``,
  ``pyramid_attention_broadcast``, ``faster_cache``.
- ``tea_cache`` in ``teacache.py`` (diffusers has none).

Evidence for every cache is the work it skips, counted by the harness where the work is done (the attention
and feed-forward submodules inside each denoiser's blocks, ``accel.features.work``), against what an uncached
call computes, per denoiser. A cache that computed everything on a run has not engaged, whatever it was
configured to do; one whose library reports cached steps that skipped nothing is "engaged, no effect".
"""

from __future__ import annotations

from typing import Any

from accel.features.base import Handle, Verdict
from accel.features.work import BlockWork, work_done

SKIPS_WORK = "a cache skips work on cached steps"


def cached_steps_verdict(counts: list[int], evidence: dict[str, Any], detail: str = "") -> Verdict:
    """Engaged when every timed run cached at least one step; the summary gives the range per run, and how
    many runs cached nothing, so a cache that engages on some prompts only is not shown as never engaging."""
    if counts and all(counts):
        return Verdict(True, f"{min(counts)}-{max(counts)} cached steps per run{detail}", evidence)
    if any(counts):
        idle = sum(1 for n in counts if n == 0)
        return Verdict(
            False,
            f"cached {min(counts)}-{max(counts)} steps per run: none on {idle} of {len(counts)} runs "
            "(engaged on some runs only)",
            evidence,
        )
    return Verdict(False, f"enabled but no step cached on any of {len(counts)} runs", evidence)


class WorkCounter(Handle):
    """The handle of a cache hook: counts, per denoiser, its calls and the work its blocks computed (``BlockWork``,
    below every hook a cache installs). ``undo`` takes the cache away on ``remove``."""

    def __init__(self, models: dict[str, Any], undo: Any = None, device: str = "cpu", rows: bool = False) -> None:
        super().__init__()
        self.undo = undo
        self.work = BlockWork(models, device, rows=rows)
        # The modules a hook matched by name (taylorseer_cache fills it; its evidence).
        self.hooked: list[str] = []
        # PAB and FasterCache: their timestep source and each denoiser's range (accel.features.timestep_caches).
        self.schedule: Any = None
        # PAB on a pipeline that calls its denoiser once per CFG branch: (pipeline class, steps per run, PAB's
        # block_skip_range).
        self.branch_sharing: tuple[str, int, int | None] | None = None

    def begin_run(self) -> None:
        super().begin_run()
        self.work.begin()

    def end_run(self) -> None:
        self.current["work"] = self.work.end()

    def computed_total(self, component: str) -> float:
        """Work units ``component`` computed so far (a running count: read it outside traced code and compare two
        readings; ``accel.diverge.curve`` reads it around each denoiser call of an untimed call)."""
        return self.work.computed(component)

    def units_per_call(self, component: str) -> int:
        """The work units one full call of ``component`` computes (each counted unit once)."""
        return len(self.work.read().get(component, {}).get("units", {}))

    def remove(self) -> None:
        self.work.remove()
        if self.undo is not None:
            self.undo()


def work_evidence(runs: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, tuple[float, float]]]]:
    """The evidence of skipped work over a handle's runs (each with its ``work`` counts), and the counts."""
    counted = [run.get("work") or {} for run in runs]
    done = work_done(counted) if counted and all(counted) else [{} for _ in counted]
    evidence = {
        "work_units": {c: len(counts["units"]) for c, counts in (counted[0] if counted else {}).items()},
        "denoiser_calls_per_run": [{c: counts["calls"] for c, counts in run.items()} for run in counted],
        "work_computed_per_run": [{c: pair[0] for c, pair in run.items()} for run in done],
        "skipped_work_per_run": [{c: round(_share(*pair), 4) for c, pair in run.items()} for run in done],
    }
    return evidence, done


def _share(computed: float, full: float) -> float:
    return 1.0 - computed / full if full else 0.0


def skipped_work_verdict(runs: list[dict[str, Any]], name: str, cached: list[int] | None = None) -> Verdict:
    """Engaged when the harness counted work not done on every timed run, in every denoiser that was called.

    ``cached``: the cached steps per run the library reports (Cache-DiT, TeaCache), judged first; where it cached
    steps on every run and no work was skipped, the verdict is "engaged, no effect" (``no_effect`` in the
    evidence: the gate and tables show it as such, never as supported)."""
    evidence, done = work_evidence(runs)
    called = sorted({c for run in done for c, (_, full) in run.items() if full})
    if not called:
        units = evidence["work_units"]
        return Verdict(
            False,
            f"harness: {name}: no attention or feed-forward submodule inside a block list of "
            f"{', '.join(units) or 'the denoiser'} was called; cannot observe the work it skips",
            evidence,
        )
    totals = [sum(pair[0] for pair in run.values()) / max(1, sum(pair[1] for pair in run.values())) for run in done]
    skipped = [1.0 - share for share in totals]
    idle = [c for c in called if all(_share(*run[c]) <= 0 for run in done if c in run)]
    if cached is not None:
        verdict = cached_steps_verdict(cached, evidence)
        if not verdict.engaged:
            return verdict
        if not any(skipped):
            reason = (
                f"{verdict.summary} by its own report, but every attention and feed-forward submodule of "
                f"{', '.join(called)} computed on every call: the cached steps skipped no work"
            )
            evidence["no_effect"] = reason
            return Verdict(True, f"engaged, no effect: {reason}", evidence)
    if skipped and all(f > 0 for f in skipped):
        if idle and len(called) > 1:
            return Verdict(
                False, f"partial: {', '.join(idle)} called and skipped no work on any run (of {called})", evidence
            )
        detail = "" if cached is None else f" ({cached_steps_verdict(cached, {}).summary})"
        return Verdict(True, f"skipped {min(skipped):.0%}-{max(skipped):.0%} of block work per run{detail}", evidence)
    if any(skipped):
        idle_runs = sum(1 for f in skipped if f <= 0)
        # A denoiser that skipped nothing on any run is said too: "some runs only" alone reads as if each expert
        # had skipped on some runs, when one of two never did (mini-wan's FirstBlockCache, wave 13's review).
        never = f"; {', '.join(idle)} skipped no work on any run (of {called})" if idle and len(called) > 1 else ""
        return Verdict(
            False, f"skipped work on some runs only: none on {idle_runs} of {len(skipped)} runs{never}", evidence
        )
    return Verdict(False, f"{name} enabled but a run computed every step (0 cached)", evidence)


def runs_cfg_as_separate_calls(pipeline: Any) -> bool:
    """Whether the pipeline calls the transformer once per CFG branch instead of batching [uncond, cond] in one
    call: diffusers marks those calls with ``cache_context("uncond")`` where the denoiser has CacheMixin; the
    pipelines of denoisers without it (Lumina 2, Kandinsky 5, Cosmos 2, Chroma) assign the unconditional call's
    result to a name of its own (``noise_pred_uncond``, ``neg_noise_pred``). SD3's second call
    (``noise_pred_skip_layers``, skip-layer guidance) is not a CFG branch."""
    import inspect
    import re

    try:
        source = inspect.getsource(type(pipeline).__call__)
    except (OSError, TypeError):
        return False
    if re.search(r"cache_context\(\s*[\"']uncond[\"']", source) is not None:
        return True
    call = r"(?:self\.(?:transformer|transformer_2|unet)|current_model)\("
    return re.search(rf"\b\w*(?:uncond|neg)\w*\s*=\s*{call}", source) is not None
