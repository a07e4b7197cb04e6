"""Parity, engagement, claim and performance gates over measured results.

One module shared by ``omni-accel gate`` and the pytest plugin. It reads results and data files and
never runs a pipeline. Each measured cell (not the baseline or its noise-floor re-run) gets a
``CellVerdict``: pass, fail or skip, with every check's measured and required values.

- Each feature of a cell is judged on its own evidence: a feature without evidence, or whose evidence
  says it did not engage, fails (never ``all([])``). A feature that engaged but cannot have its intended
  effect on this device (offload on a CPU) is labelled so, not counted as a plain success.
- Parity: lossless thresholds by the dtype the cell ran in and its modality, lossy by family (the loosest
  family for a mix), from ``feature_matrix/thresholds.yaml``. A measured noise floor (the baseline against
  its own re-run) loosens a lossless threshold, never below ``lossless_minimum``. Outputs that differ
  between timed passes (``outputs_stable`` false) fail lossless parity. SSIM is always checked. A video's
  worst frame (named) and worst frame pair's temporal consistency are judged as well (``accel.gate.video``).
- Claims (``feature_matrix/claims.yaml``) excuse only their own feature: a crash nobody can attribute,
  a parity loss in a combined cell, or another feature that did not engage still fails. A failure the
  claims fully explain is an expected failure (skipped, with the reason); works within parity but claimed
  unsupported -> a docs-drift finding; claimed supported but failed -> fail.
- A cell that did not run is never a pass: unsupported in this environment (no GPU, package missing) or
  on this model, it is skipped with its reason (fail when the model claims the feature supported).
- Performance (optional ``--baseline``): entries keyed by device name (exact, then a substring such as
  ``H200`` of ``NVIDIA H200``, then ``cpu``/``cuda``); warm median within ``max(base * (1 + rel), base +
  abs)``; faster by more than ``refresh`` -> a notice to refresh it; an entry that matches no measured
  cell -> a notice.

The package by concern (every public name is re-exported here, so ``from accel.gate import ...`` is the
interface): ``verdict`` (outcomes, ``Check``, ``CellVerdict``, ``GateReport``, the references), ``data``
(loading and checking the thresholds, claims and performance-baseline files), ``limits`` (parity by class,
adherence and performance limits), ``video`` (a video's worst frame and frame pair), ``evidence`` (the
judgements a record carries before it is written), ``judge`` (the verdicts on cells, references and a whole
results file) and ``render`` (markdown and JUnit).
"""

from __future__ import annotations

from accel.gate.data import (
    CLAIM_KEYS,
    MODALITIES,
    MODEL_OVERRIDE_KEYS,
    PERF_KEYS,
    PERF_TOLERANCES,
    THRESHOLD_KEYS,
    GateData,
    check_claims,
    check_perf_baseline,
    check_thresholds,
    claim_for,
    load_gate_data,
)
from accel.gate.evidence import (
    evidence_problem,
    judge_engine_engagement,
    judge_measured_cell,
    judge_timing_validity,
    not_engaged_error,
)
from accel.gate.judge import (
    NO_BASELINE,
    gate_cell,
    gate_records,
    gate_reference,
    judge_records,
    noise_floors,
)
from accel.gate.limits import (
    EIGHT_BIT,
    adherence_check,
    baseline_device,
    combined_lossless_checks,
    declared_adherence_limits,
    declared_lossy_limits,
    limit_text,
    lossless_limits,
    lossy_families,
    lossy_part,
    output_precision,
    parity_pair,
    perf_check,
    required_parity,
    unmatched_baseline_entries,
    unmatched_claim_models,
    unmatched_threshold_models,
)
from accel.gate.render import (
    SKIP_KINDS,
    junit_xml,
    markdown_summary,
    summary_counts,
)
from accel.gate.verdict import (
    BASELINE,
    ENVIRONMENT,
    EXPECTED,
    FAIL,
    HARNESS,
    PASS,
    SKIP,
    UNSUPPORTED,
    CellVerdict,
    Check,
    GateReport,
    is_reference,
)
from accel.gate.video import video_checks, worst_frame_limits

__all__ = [
    "BASELINE",
    "CLAIM_KEYS",
    "EIGHT_BIT",
    "ENVIRONMENT",
    "EXPECTED",
    "FAIL",
    "HARNESS",
    "MODALITIES",
    "MODEL_OVERRIDE_KEYS",
    "NO_BASELINE",
    "PASS",
    "PERF_KEYS",
    "PERF_TOLERANCES",
    "SKIP",
    "SKIP_KINDS",
    "THRESHOLD_KEYS",
    "UNSUPPORTED",
    "CellVerdict",
    "Check",
    "GateData",
    "GateReport",
    "adherence_check",
    "baseline_device",
    "check_claims",
    "check_perf_baseline",
    "check_thresholds",
    "claim_for",
    "combined_lossless_checks",
    "declared_adherence_limits",
    "declared_lossy_limits",
    "evidence_problem",
    "gate_cell",
    "gate_records",
    "gate_reference",
    "is_reference",
    "judge_engine_engagement",
    "judge_measured_cell",
    "judge_records",
    "judge_timing_validity",
    "junit_xml",
    "limit_text",
    "load_gate_data",
    "lossless_limits",
    "lossy_families",
    "lossy_part",
    "markdown_summary",
    "noise_floors",
    "not_engaged_error",
    "output_precision",
    "parity_pair",
    "perf_check",
    "required_parity",
    "summary_counts",
    "unmatched_baseline_entries",
    "unmatched_claim_models",
    "unmatched_threshold_models",
    "video_checks",
    "worst_frame_limits",
]
