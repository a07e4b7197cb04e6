"""Stage by stage, step by step: two captured traces compared in the order a call runs, and the owner of the
first difference established by isolation.

Order: the prompt embeddings the denoiser receives at step 0 (and pooled projections and masks where passed),
the initial latents, the timesteps and sigmas (exact equality when both sides compute in one dtype), then per
step each denoiser call's output, the guided prediction ``scheduler.step`` receives and the latents it returns,
then the VAE's input and output and the final images. Ownership: a denoiser output beyond tolerance is bisected
(``accel.diverge.bisect``); a prediction beyond tolerance from agreeing denoiser outputs is the CFG combination;
latents beyond tolerance from an agreeing prediction are replayed through side B's scheduler step with side A's
inputs (the scheduler owns it when that reproduces the difference); a VAE output beyond tolerance from agreeing
latents is decoded again by side B's VAE from side A's latents.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from accel.diverge.bisect import call_fresh, identical_inputs, locate
from accel.diverge.capture import Capture, Trace, replay_step
from accel.diverge.compare import INCOMPARABLE, Metrics, metrics, metrics_of, tensors_of, worst
from accel.diverge.result import Divergence, DivergeResult, Row

TEXT_KEYS = ("encoder_hidden_states", "pooled_projections", "prompt_embeds", "pooled_prompt_embeds")


@dataclass
class Traced:
    """One side after its designated call: its label, pipeline, trace and the capture (what it wrapped); a side
    that ran in other processes (ranks) has neither pipeline nor capture here."""

    label: str
    pipeline: Any
    trace: Trace
    capture: Capture | None


def _text_keys(kwargs: dict[str, Any]) -> list[str]:
    return [k for k in kwargs if (k in TEXT_KEYS or "mask" in k) and isinstance(kwargs[k], torch.Tensor)]


class _Walk:
    """Rows appended in order; the first one beyond tolerance becomes the divergence (its owner decided by
    the caller's ``owner`` callable, run once, only for that row)."""

    def __init__(self, result: DivergeResult) -> None:
        self.result = result

    def add(self, stage: str, step: int | None, what: str, found: Metrics, exact: bool, owner: Any) -> None:
        within = found.within(self.result.tolerance, exact)
        self.result.rows.append(Row(stage, step, what, found, exact, within))
        if within:
            return
        if step is not None and stage in ("denoiser", "prediction", "step_latents") and self.result.first_step is None:
            self.result.first_step = step
        if self.result.first is None:
            self.result.first = owner(stage, step, what, found)


def analyse(
    a: Traced, b: Traced, result: DivergeResult, exact_inputs: bool, mapping: dict[str, str] | None = None
) -> DivergeResult:
    """Fill ``result`` with every row and the first divergence of ``b`` against the reference ``a``
    (``mapping``: side A's module names to side B's, for the block bisection; ``accel.diverge.bisect``)."""
    walk = _Walk(result)
    ta, tb = a.trace, b.trace
    tolerance = result.tolerance

    def plain(component: str, evidence: str) -> Any:
        return lambda stage, step, what, found: Divergence(component, step, stage, what, found, evidence=evidence)

    # --- the inputs of the loop ---------------------------------------------------------------------------
    if ta.calls and tb.calls:
        first_a, first_b = ta.calls[0].kwargs, tb.calls[0].kwargs
        for key in _text_keys(first_a):
            found = metrics(first_a[key], first_b[key]) if key in first_b else INCOMPARABLE
            walk.add("text", 0, f"{key} (denoiser input, step 0)", found, exact_inputs, _text_owner(a, b, tolerance))
    else:
        result.notes.append("no denoiser call was captured on one side: no transformer/unet attribute to hook")
    if ta.steps and tb.steps:
        walk.add(
            "latents",
            0,
            "initial latents",
            metrics(ta.steps[0].sample, tb.steps[0].sample),
            exact_inputs,
            plain("latents", "the latents entering the first step differ: the initial noise"),
        )
    for name in ("timesteps", "sigmas"):
        left, right = getattr(ta, name), getattr(tb, name)
        if isinstance(left, torch.Tensor) and isinstance(right, torch.Tensor):
            walk.add(
                "timesteps",
                0,
                name,
                metrics(left, right),
                exact_inputs,
                plain("scheduler", f"the scheduler's {name} differ before the first step"),
            )
    # --- every step -----------------------------------------------------------------------------------------
    for step in range(max(len(ta.steps), len(tb.steps))):
        calls_a, calls_b = ta.calls_at(step), tb.calls_at(step)
        if len(calls_a) != len(calls_b):
            walk.add(
                "denoiser",
                step,
                f"denoiser calls: {len(calls_a)} vs {len(calls_b)}",
                INCOMPARABLE,
                False,
                plain("cfg", "the sides call the denoiser a different number of times in this step"),
            )
        for index, (call_a, call_b) in enumerate(zip(calls_a, calls_b, strict=False)):
            what = f"{call_a.denoiser} output" + (f" (call {index + 1} of {len(calls_a)})" if len(calls_a) > 1 else "")
            walk.add(
                "denoiser",
                step,
                what,
                metrics(call_a.output, call_b.output),
                False,
                _denoiser_owner(a, b, call_a, call_b, tolerance, mapping),
            )
        if step >= len(ta.steps) or step >= len(tb.steps):
            walk.add(
                "step_latents",
                step,
                "scheduler steps: one side stopped",
                INCOMPARABLE,
                False,
                plain("scheduler", "the sides take a different number of scheduler steps"),
            )
            continue
        sa, sb = ta.steps[step], tb.steps[step]
        guided = len(calls_a) > 1
        walk.add(
            "prediction",
            step,
            "guided prediction (scheduler input)" if guided else "prediction (scheduler input)",
            metrics(sa.model_output, sb.model_output),
            False,
            plain(
                "cfg" if guided else "pipeline",
                "the denoiser outputs agree, their CFG combination does not"
                if guided
                else "the denoiser output agrees, the prediction handed to the scheduler does not",
            ),
        )
        walk.add(
            "step_latents",
            step,
            "latents after scheduler.step",
            metrics(sa.prev_sample, sb.prev_sample),
            False,
            _scheduler_owner(a, b, step, tolerance),
        )
    # --- after the loop -------------------------------------------------------------------------------------
    if ta.decodes and tb.decodes:
        (za, xa), (zb, xb) = ta.decodes[0], tb.decodes[0]
        walk.add(
            "decode",
            None,
            "VAE input",
            metrics(za, zb),
            False,
            plain("pipeline", "the final latents agree, the VAE's input does not: unpacking or de-normalising"),
        )
        walk.add("decode", None, "VAE output", metrics(xa, xb), False, _vae_owner(a, b, tolerance))
    if ta.images and tb.images:
        left_images = torch.from_numpy(np.stack(ta.images))
        right_images = torch.from_numpy(np.stack(tb.images)) if len(tb.images) == len(ta.images) else None
        found = metrics(left_images, right_images) if right_images is not None else INCOMPARABLE
        walk.add(
            "image",
            None,
            "output images",
            found,
            False,
            plain("postprocess", "the VAE outputs agree, the images do not: post-processing"),
        )
    return result


def _text_owner(a: Traced, b: Traced, tolerance: float) -> Any:
    ta, tb = a.trace, b.trace

    def owner(stage: str, step: int | None, what: str, found: Metrics) -> Divergence:
        fed = _embeddings_fed(a, b, tolerance)
        for name in ta.encoders:
            if name not in tb.encoders or len(ta.encoders[name]) != len(tb.encoders[name]):
                continue
            for index, (left, right) in enumerate(zip(ta.encoders[name], tb.encoders[name], strict=True)):
                encoder = worst(metrics_of(left, right))
                if not encoder.within(tolerance, exact=True):
                    evidence = f"{name}'s output (call {index + 1}) differs: the first text encoder that does{fed}"
                    return Divergence(name, step, stage, what, found, evidence=evidence)
        evidence = f"every text encoder's output agrees: the code between the encoders and the denoiser{fed}"
        return Divergence("text_encoder", step, stage, what, found, evidence=evidence)

    return owner


def _embeddings_fed(a: Traced, b: Traced, tolerance: float) -> str:
    """Side A's prompt embeddings (with the rest of its step-0 inputs, which agree) fed into side B's denoiser:
    whether B's denoiser then gives A's output, i.e. whether the embeddings alone own what follows."""
    if b.pipeline is None or not a.trace.calls or not b.trace.calls:
        return ""
    call_a, call_b = a.trace.calls[0], b.trace.calls[0]
    args, kwargs = identical_inputs(call_a, call_b)
    with torch.no_grad():
        out = tensors_of(call_fresh(getattr(b.pipeline, call_b.denoiser), args, kwargs)())[0]
    isolated = metrics(call_a.output, out.to(call_a.output.device))
    if isolated.within(tolerance):
        return (
            f"; {b.label}'s {call_b.denoiser} fed {a.label}'s embeddings gives {a.label}'s step-0 output: the "
            "embeddings own the divergence, the denoiser does not"
        )
    return (
        f"; {b.label}'s {call_b.denoiser} fed {a.label}'s embeddings still differs at step 0 (rel-L2 "
        f"{isolated.rel_l2:.3g}): the denoiser differs too"
    )


def _denoiser_owner(
    a: Traced, b: Traced, call_a: Any, call_b: Any, tolerance: float, mapping: dict[str, str] | None
) -> Any:
    def owner(stage: str, step: int | None, what: str, found: Metrics) -> Divergence:
        if b.pipeline is None:
            return _mirrored_denoiser(a, b, call_a, call_b, tolerance, (stage, step, what, found))
        place = locate(
            getattr(a.pipeline, call_a.denoiser),
            getattr(b.pipeline, call_b.denoiser),
            call_a,
            call_b,
            tolerance,
            mapping,
        )
        evidence = place.note or "both denoisers run on side A's inputs of this call: the first block beyond tolerance"
        return Divergence(
            call_a.denoiser, step, stage, what, found, place.block, place.submodule, place.operation, evidence, place.op
        )

    return owner


def _mirrored_denoiser(
    a: Traced, b: Traced, call_a: Any, call_b: Any, tolerance: float, row: tuple[str, int | None, str, Metrics]
) -> Divergence:
    """Side B ran elsewhere (ranks): side A's denoiser on side B's inputs of this call; reproducing B's output
    says the inputs carry the difference, not B's computation."""
    denoiser = getattr(a.pipeline, call_a.denoiser)
    args, kwargs = identical_inputs(call_b, call_a)  # A's calling convention, B's values
    with torch.no_grad():
        out = tensors_of(call_fresh(denoiser, args, kwargs)())[0]
    isolated = metrics(call_b.output, out.to(call_b.output.device))
    within = (
        f"{a.label}'s denoiser fed {b.label}'s inputs of this call gives {b.label}'s output: the inputs carry "
        "the difference (earlier differences within tolerance accumulated)"
    )
    beyond = (
        f"{a.label}'s denoiser fed {b.label}'s inputs of this call still differs from {b.label}'s output (rel-L2 "
        f"{REL_L2}): {b.label}'s denoiser computes differently; it ran in other processes, so its blocks are not "
        "bisected"
    )
    return _owned(isolated, tolerance, row, ("accumulation", within), (call_a.denoiser, beyond))


REL_L2 = "{rel_l2}"  # where an evidence text beyond tolerance says the isolated re-run's rel-L2


def _owned(
    isolated: Metrics,
    tolerance: float,
    row: tuple[str, int | None, str, Metrics],
    within: tuple[str, str],
    beyond: tuple[str, str],
) -> Divergence:
    """The divergence an isolated re-run names: ``within``'s (owner, evidence) when the re-run reproduces the
    other side within ``tolerance``, else ``beyond``'s, its ``REL_L2`` replaced by the re-run's rel-L2."""
    stage, step, what, found = row
    owner, evidence = within if isolated.within(tolerance) else beyond
    evidence = evidence.replace(REL_L2, f"{isolated.rel_l2:.3g}")
    return Divergence(owner, step, stage, what, found, evidence=evidence)


def _scheduler_owner(a: Traced, b: Traced, step: int, tolerance: float) -> Any:
    def owner(stage: str, _: int | None, what: str, found: Metrics) -> Divergence:
        sa, sb = a.trace.steps[step], b.trace.steps[step]
        # Side B's scheduler fed side A's inputs; a side run elsewhere (ranks): side A's fed side B's.
        fed, ran = (sb, sa) if b.capture is not None else (sa, sb)
        capture = b.capture if b.capture is not None else a.capture
        assert capture is not None
        pipeline = b.pipeline if b.capture is not None else a.pipeline
        timestep = ran.timestep.to(fed.timestep.device)
        replayed = replay_step(
            pipeline.scheduler, capture.scheduler_step, fed.state, ran.model_output, timestep, ran.sample
        )
        isolated = metrics(ran.prev_sample, replayed.to(ran.prev_sample.device))
        mine, theirs = (b.label, a.label) if b.capture is not None else (a.label, b.label)
        within = (
            f"{mine}'s scheduler step fed {theirs}'s prediction and latents gives {theirs}'s latents: the "
            "differences within tolerance before this step accumulated"
        )
        beyond = (
            f"{mine}'s scheduler step fed {theirs}'s prediction and latents still differs (rel-L2 {REL_L2}): the "
            "scheduler owns it"
        )
        return _owned(isolated, tolerance, (stage, step, what, found), ("accumulation", within), ("scheduler", beyond))

    return owner


def _vae_owner(a: Traced, b: Traced, tolerance: float) -> Any:
    def owner(stage: str, step: int | None, what: str, found: Metrics) -> Divergence:
        # Side B's VAE fed side A's latents; a side run elsewhere (ranks): side A's VAE fed side B's.
        ran, fed = (a.trace.decodes[0], b.trace.decodes[0]) if b.capture is not None else (
            b.trace.decodes[0], a.trace.decodes[0])  # fmt: skip
        capture = b.capture if b.capture is not None else a.capture
        assert capture is not None
        z, x = ran
        with torch.no_grad():
            out = capture.vae_decode(z.to(fed[0].dtype), return_dict=False)[0]
        isolated = metrics(x, out.to(x.device))
        mine, theirs = (b.label, a.label) if b.capture is not None else (a.label, b.label)
        within = f"{mine}'s VAE decodes {theirs}'s latents to {theirs}'s output: the VAE's input owns it"
        beyond = f"{mine}'s VAE fed {theirs}'s latents still differs (rel-L2 {REL_L2}): the VAE owns it"
        return _owned(isolated, tolerance, (stage, step, what, found), ("pipeline", within), ("vae", beyond))

    return owner
