"""Evidence is judged over every call that produced a number, the interleaved pairs included: a recompile
during the pairs that give the speedup fails compile's evidence (it used to be judged before the pairs ran)."""

from __future__ import annotations

import torch
from conftest import small_profile

from accel.profile import parse_profile
from accel.sweep import timed
from accel.sweep.runner import run_sweep


def test_a_recompile_during_the_interleaved_pairs_is_judged(tmp_path, monkeypatch):
    original = timed.pair_drawer

    def pair_drawer(target, reference, applied, requests):
        draw = original(target, reference, applied, requests)

        def drop_compiled_code_before_the_second_pair(index):
            if index == 1:
                torch._dynamo.reset()  # the next variant call compiles again, inside a timed pair
            return draw(index)

        return drop_compiled_code_before_the_second_pair

    monkeypatch.setattr(timed, "pair_drawer", pair_drawer)
    variants = [{"name": "compiled", "features": {"compile": {"backend": "eager"}}}]
    raw = small_profile(["tiny-flux"], variants, steps=1, height=32, width=32)
    raw["measure"].update(noise_floor=False, pairs=3, max_pairs=3)
    records = {r["variant"]: r for r in run_sweep(parse_profile(raw), "t.yaml", tmp_path, show_progress=False).records}
    evidence = records["compiled"]["evidence"]["compile"]
    # Runs: 1 headline call, 1 stage-pass call, then the pairs' variant calls: the second pair's is run 4.
    assert evidence["engaged"] is False and "recompiled during timed run(s) [4]" in evidence["summary"], evidence
    assert records["compiled"]["status"] == "failed"
