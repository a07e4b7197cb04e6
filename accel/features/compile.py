"""torch.compile (``compile``): regional (the denoiser's repeated blocks) or the full denoiser.

Regional compile (``compile_repeated_blocks``) compiles one block class once and reuses the graph for
every instance: compile time stays small, and hooks around the blocks (offload, cache) stay outside the
graphs. Full compile traces the whole transformer: possibly faster, much slower to compile, and it does
not combine with cache or offload hooks. Compile time is part of the cold time (the first call).

Lossless in intent; on a CPU inductor's fused kernels can round differently (the report shows how much). Every
denoiser is compiled: the transformer, or a UNet (diffusers' ``UNet2DConditionModel`` declares its
``BasicTransformerBlock`` as ``_repeated_blocks``), and a pipeline with two, Wan 2.2's ``transformer`` and
``transformer_2``, gets both. Evidence: the compiled modules, the graphs and graph breaks dynamo recorded, and
calls that went through the compiled code during each timed run, per denoiser beside each denoiser's own
calls: a denoiser that was called and ran none of its compiled code makes the verdict partial (not engaged),
naming it. The graph count must stay stable across the timed runs: a run in which dynamo converted a frame (a
guard failed: recompile) fails the cell with the reason, and so does a frame dynamo gave up on during a timed
run (the recompile limit: it runs eagerly). A frame it gave up on once, when the code was first traced (a
data-dependent operator such as ``.item()``), runs eagerly on every call while the rest stays compiled: the
verdict is engaged, its summary and evidence (``eager_frames``, ``eager_reasons``) say so, as a bare
``transformer.compile()`` loop would show (``benchmarks/compile_full_bare.py``).
"""

from __future__ import annotations

import functools
from typing import Any, Literal

from pydantic import Field

from accel.features.base import (
    Feature,
    FeatureClass,
    FeatureConfig,
    Handle,
    Owner,
    Reach,
    RunContext,
    Stage,
    Support,
    Verdict,
    denoisers,
)
from accel.features.compile_casts import low_precision_casts, precision_cast_note


class CompileConfig(FeatureConfig):
    """Options of ``compile``."""

    granularity: Literal["regional", "full"] = Field(
        default="regional", description="regional: repeated blocks (fast to compile); full: whole transformer."
    )
    mode: Literal["default", "max-autotune-no-cudagraphs", "reduce-overhead", "max-autotune"] = Field(
        default="default", description="Inductor mode; autotune modes compile longer for faster kernels."
    )
    dynamic: bool | None = Field(default=None, description="Dynamic shapes; None lets dynamo decide.")
    fullgraph: bool = Field(default=False, description="Fail on any graph break instead of splitting.")
    backend: str = Field(default="inductor", description="torch.compile backend (inductor, aot_eager, eager).")


def _dynamo_counters() -> dict[str, int]:
    """Dynamo's process-wide counters: graphs compiled, graph breaks, frames it tried and failed to convert."""
    from torch._dynamo.utils import counters

    return {
        "unique_graphs": int(counters["stats"]["unique_graphs"]),
        "graph_breaks": int(sum(counters["graph_break"].values())),
        "frames_converted": int(counters["frames"]["total"]),
        "frames_failed": int(counters["frames"]["total"] - counters["frames"]["ok"]),
    }


class _CompileHandle(Handle):
    """Counts calls into the compiled code and calls of each denoiser (both outside the compiled frames),
    and dynamo's counters around each run."""

    # Why compiled and eager may differ beyond rounding (``accel.features.compile_casts``), or None.
    parity_note: str | None = None

    def __init__(self, modules: dict[str, list[Any]], roots: dict[str, Any], before: dict[str, int]) -> None:
        super().__init__()
        self.modules_by_denoiser = modules
        self.modules = [module for group in modules.values() for module in group]
        self.before = before
        self.run_start = before
        for name, group in modules.items():
            for module in group:
                module._compiled_call_impl = self._counted(module._compiled_call_impl, name)
        # A denoiser's own calls: counted by its compiled entry when the whole module is compiled (a hook
        # there would run inside the graph), by a pre-hook on its (eager) top module otherwise.
        self.hooks = [
            root.register_forward_pre_hook(self._call_counter(name))
            for name, root in roots.items()
            if root not in modules.get(name, [])
        ]
        self.counted_by_entry = {name for name, root in roots.items() if root in modules.get(name, [])}

    def _bump(self, key: str, name: str) -> None:
        counts = self.current.setdefault(key, {})
        counts[name] = counts.get(name, 0) + 1

    def _counted(self, compiled: Any, denoiser: str) -> Any:
        # Called by nn.Module.__call__, outside the compiled frame: a plain counter is safe here.
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.current["compiled_calls"] = self.current.get("compiled_calls", 0) + 1
            self._bump("compiled_calls_by_denoiser", denoiser)
            return compiled(*args, **kwargs)

        # ``__wrapped__``: the compiled entry without the counter (benchmarks/harness_overhead.py's bare calls).
        return functools.update_wrapper(counted, compiled, assigned=(), updated=())

    def _call_counter(self, denoiser: str) -> Any:
        def count(module: Any, args: Any) -> None:
            self._bump("denoiser_calls", denoiser)

        return count

    def begin_run(self) -> None:
        super().begin_run()
        self.run_start = _dynamo_counters()

    def end_run(self) -> None:
        now = _dynamo_counters()
        # Frames dynamo converted during this run: a recompile (new graphs) or a failed one (runs eagerly).
        self.current["new_graphs"] = now["unique_graphs"] - self.run_start["unique_graphs"]
        self.current["frames_converted"] = now["frames_converted"] - self.run_start["frames_converted"]
        self.current["frames_failed"] = now["frames_failed"] - self.run_start["frames_failed"]
        for name in self.counted_by_entry:  # the compiled entry's calls are the denoiser's calls
            calls = self.current.get("compiled_calls_by_denoiser", {}).get(name, 0)
            self.current.setdefault("denoiser_calls", {})[name] = calls

    def dynamo_delta(self) -> dict[str, int]:
        now = _dynamo_counters()
        return {key: now[key] - self.before[key] for key in now}

    def eager_reasons(self) -> list[str]:
        """The first line of each reason dynamo gave for code it could not compile since apply (process-wide
        counters: read right after the cell's own runs)."""
        from torch._dynamo.utils import counters

        return sorted({(str(reason).strip().splitlines() or [""])[0] for reason in counters["unimplemented"]})

    def untouched(self) -> dict[str, int]:
        """Denoiser name -> its calls in runs where none of its compiled code ran (it ran eagerly)."""
        untouched: dict[str, int] = {}
        for run in self.runs:
            compiled = run.get("compiled_calls_by_denoiser", {})
            for name, calls in run.get("denoiser_calls", {}).items():
                if calls and not compiled.get(name):
                    untouched[name] = untouched.get(name, 0) + calls
        return untouched

    def remove(self) -> None:
        import torch

        for hook in self.hooks:
            hook.remove()
        for module in self.modules:
            module._compiled_call_impl = None
        torch._dynamo.reset()


class Compile(Feature[CompileConfig, _CompileHandle]):
    """Compile the transformer with torch.compile."""

    name = "compile"
    reach = Reach.EVERY_DENOISER
    denoiser_evidence = ("compiled_calls_by_denoiser_per_run", "calls through compiled code")
    family = "compile"
    feature_class = FeatureClass.LOSSLESS
    stage = Stage.COMPILE
    config_cls = CompileConfig
    global_state = ("dynamo",)  # dynamo's caches and config (cache_size_limit) are process-wide
    primary_option = "granularity"
    description = "torch.compile of every denoiser (transformer, transformer_2, unet): regional or full"

    def check(self, pipeline: Any, device: str, options: CompileConfig) -> Support:
        if not denoisers(pipeline):
            return Support.no(f"pipeline {type(pipeline).__name__} has no transformer or unet", Owner.MODEL)
        if options.granularity == "regional":
            for name, module in denoisers(pipeline).items():
                if not getattr(module, "_repeated_blocks", None):
                    return Support.no(
                        f"{name} {type(module).__name__} has no _repeated_blocks; diffusers' compile_repeated_blocks "
                        '"`_repeated_blocks` attribute is empty."',
                        Owner.LIBRARY,
                    )
        return self.probe(device, options)

    def probe(self, device: str, options: CompileConfig, dtype: str | None = None) -> Support:
        if options.mode == "reduce-overhead" and not device.startswith("cuda"):
            return Support.no(f"mode reduce-overhead uses CUDA graphs (found: {device})", Owner.DEVICE)
        return Support.yes()

    def apply(self, pipeline: Any, options: CompileConfig, context: RunContext) -> _CompileHandle:
        import torch

        # Regional compile compiles one graph per block class; many blocks of a big model, each with
        # its own guards, exceed dynamo's default cache of 8 entries per code object.
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
        kwargs = {
            "mode": None if options.mode == "default" else options.mode,
            "dynamic": options.dynamic,
            "fullgraph": options.fullgraph,
            "backend": options.backend,
        }
        before = _dynamo_counters()
        roots = denoisers(pipeline)  # every denoiser: a second one (transformer_2) is compiled too
        for transformer in roots.values():
            if options.granularity == "regional":
                transformer.compile_repeated_blocks(**kwargs)
            else:
                transformer.compile(**kwargs)
        modules = {
            name: [m for m in root.modules() if getattr(m, "_compiled_call_impl", None) is not None]
            for name, root in roots.items()
        }
        handle = _CompileHandle(modules, roots, before)
        handle.parity_note = precision_cast_note(low_precision_casts(roots), options.backend)
        return handle

    def verify(self, handle: _CompileHandle) -> Verdict:
        delta = handle.dynamo_delta()
        calls = [run.get("compiled_calls", 0) for run in handle.runs]
        recompiles = [run.get("frames_converted", 0) for run in handle.runs]
        untouched = handle.untouched()
        evidence: dict[str, Any] = {
            "compiled_modules": len(handle.modules),
            "compiled_modules_by_denoiser": {name: len(group) for name, group in handle.modules_by_denoiser.items()},
            "compiled_calls_per_run": calls,
            "compiled_calls_by_denoiser_per_run": [run.get("compiled_calls_by_denoiser", {}) for run in handle.runs],
            "denoiser_calls_per_run": [run.get("denoiser_calls", {}) for run in handle.runs],
            "new_graphs_per_run": [run.get("new_graphs", 0) for run in handle.runs],
            "frames_converted_per_run": recompiles,
            **delta,
        }
        if handle.parity_note:  # shown beside the cell when it is out of parity
            evidence["parity_note"] = handle.parity_note
        if delta["unique_graphs"] == 0 or not calls or not all(calls):
            return Verdict(False, "compile requested but no compiled graph ran during the timed runs", evidence)
        if untouched:
            total = {name: sum(run.get("denoiser_calls", {}).get(name, 0) for run in handle.runs) for name in untouched}
            ran = ", ".join(f"{name} on {calls} of {total[name]} calls" for name, calls in untouched.items())
            return Verdict(
                False,
                f"partial: a denoiser ran without its compiled code ({ran}); compiled: "
                + ", ".join(name for name in handle.modules_by_denoiser if name not in untouched),
                {**evidence, "partial": True, "untouched_denoiser_calls": untouched},
            )
        if handle.calls_before_window == 0 and recompiles[0] and not any(recompiles[1:]):
            # The window holds the first call since apply (no warm-up was set aside): that call compiled.
            after = f"no recompile in the {len(calls) - 1} call(s) after it" if len(calls) > 1 else "no call after it"
            return Verdict(
                True,
                f"{len(handle.modules)} compiled modules, {delta['unique_graphs']} graphs, compiled during the first "
                f"call ({after}): its time includes compiling; time the calls after a warm-up "
                "(applied.reset_evidence())",
                {**evidence, "compiled_in_first_call": True},
            )
        if any(recompiles):
            runs = [index + 1 for index, count in enumerate(recompiles) if count]
            return Verdict(
                False,
                f"recompiled during timed run(s) {runs}: dynamo converted {sum(recompiles)} frame(s), "
                f"{sum(evidence['new_graphs_per_run'])} new graph(s) (guards failed; the times include compiling)",
                evidence,
            )
        failed_in_runs = [run.get("frames_failed", 0) for run in handle.runs]
        if any(failed_in_runs):  # dynamo gave up during a timed run (the recompile limit): it ran eagerly there
            return Verdict(
                False,
                f"dynamo failed to convert {sum(failed_in_runs)} frame(s) during the timed runs (recompile limit or "
                "unsupported code): they ran eagerly",
                {**evidence, "frames_failed_per_run": failed_in_runs},
            )
        summary = (
            f"{len(handle.modules)} compiled modules, {delta['unique_graphs']} graphs, "
            f"{delta['graph_breaks']} graph breaks, no recompile during {len(calls)} timed runs"
        )
        if delta["frames_failed"]:
            # Given up once, when the code was first traced (a data-dependent operator, say): that frame runs
            # eagerly on every call, the rest compiled, nothing recompiles. A property of the model's code under
            # full compile (a bare `transformer.compile()` loop shows the same), said as a constraint.
            reasons = handle.eager_reasons()
            return Verdict(
                True,
                f"{summary}; {delta['frames_failed']} frame(s) dynamo could not convert run eagerly"
                + (f" ({reasons[0]})" if reasons else ""),
                {**evidence, "eager_frames": delta["frames_failed"], "eager_reasons": reasons},
            )
        return Verdict(True, summary, evidence)
