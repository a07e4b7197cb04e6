"""Why kandinsky5's compiled output is out of lossless parity (issue 40, wave 8): its attention processor rounds
the rotated query and key to bfloat16 inside a float32 forward, and inductor does not emulate that rounding by
default. The compile evidence finds such casts and says so beside the cell; a model without them gets no note."""

from __future__ import annotations

import pytest
import torch

from accel.features.compile_casts import low_precision_casts, precision_cast_note


class _Rounds(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x).to(torch.bfloat16).type_as(x)


class _Clean(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x).float()


def test_a_float32_model_that_rounds_to_16_bits_is_found_and_one_that_does_not_is_not():
    assert low_precision_casts({"transformer": _Rounds()}) == ["_Rounds: `to(torch.bfloat16)`"]
    assert low_precision_casts({"transformer": _Clean()}) == []
    # A model computing in bfloat16 anyway: its casts are not a float32 model's extra rounding.
    assert low_precision_casts({"transformer": _Rounds().to(torch.bfloat16)}) == []


def test_the_note_is_inductors_default_only():
    # torch's config.patch, not monkeypatch: monkeypatch's undo deletes an attribute the module did not hold in its
    # __dict__, and deleting a torch config entry hides it, so every later compile in the process failed
    # ("torch._inductor.config.emulate_precision_casts does not exist", CI under two test workers).
    import torch._inductor.config as inductor_config

    casts = ["_Rounds: `to(torch.bfloat16)`"]
    with inductor_config.patch(emulate_precision_casts=False):
        note = precision_cast_note(casts, "inductor")
        assert note is not None and "_Rounds: `to(torch.bfloat16)`" in note and "rather than a compile defect" in note
        assert precision_cast_note([], "inductor") is None
        assert precision_cast_note(casts, "aot_eager") is None  # eager kernels round as eager does
    with inductor_config.patch(emulate_precision_casts=True):
        assert precision_cast_note(casts, "inductor") is None
    assert hasattr(inductor_config, "emulate_precision_casts")  # still there for every later compile


@pytest.mark.parametrize(("entry", "found"), [("tiny-kandinsky5", True), ("tiny-flux", False)])
def test_the_zoo_families_casts(entry, found):
    from accel.zoo import build_pipeline_in_memory

    pipe = build_pipeline_in_memory(entry)
    casts = low_precision_casts({"transformer": pipe.transformer})
    assert any(c.startswith("Kandinsky5AttnProcessor: `to(torch.bfloat16)`") for c in casts) is found
    assert bool(casts) is found


def test_the_compile_evidence_carries_the_note_and_the_table_shows_it():
    from test_judgements import _compile_handle, _verify

    steady = [{"compiled_calls": 4, "frames_converted": 0, "new_graphs": 0}] * 2
    handle = _compile_handle(steady)
    assert "parity_note" not in _verify("compile", handle).evidence
    handle.parity_note = "the model rounds to 16 bits"
    assert _verify("compile", handle).evidence["parity_note"] == "the model rounds to 16 bits"
