"""The roofline without a GPU: FLOPs of real shapes on the meta device, floors, and what features can save."""

from __future__ import annotations

import psutil
import pytest
from conftest import invoke

from accel.errors import ConfigError
from accel.measure.roofline import compute, format_text


@pytest.fixture(scope="module")
def flux():
    rss = psutil.Process().memory_info().rss
    result = compute("synthetic:flux.1-dev", 1024, 1024, 28, device="h200")
    # 12B + 4.8B parameters in bf16 would be ~34 GB: counting on meta allocates none of it.
    assert psutil.Process().memory_info().rss - rss < 2e9
    return result


def test_flux_dev_forward_matches_the_published_count(flux):
    assert (flux.image_tokens, flux.text_tokens) == (4096, 512)
    assert abs(flux.forward.total / 74.4e12 - 1) < 0.02  # published: ~74.4 TFLOP per transformer forward
    # Attention exactly: 19 double + 38 single blocks, QK^T and AV over 4608 tokens, 24 heads of 128.
    assert flux.forward.attention == 57 * 4 * 4608 * 4608 * 128 * 24
    assert flux.forward.linear + flux.forward.attention <= flux.forward.total
    assert flux.per_step == flux.forward.total  # guidance-distilled: one forward per step


def test_floors_follow_from_the_counts_and_the_peak(flux):
    assert flux.floor_step_s == pytest.approx(flux.per_step / 989e12)
    fixed = sum(c.total for c in flux.encoders.values()) + flux.vae_decode.total
    assert flux.floor_image_s == pytest.approx(28 * flux.floor_step_s + fixed / 989e12)
    assert all(c.error is None and c.total > 0 for c in [*flux.encoders.values(), flux.vae_decode])
    assert flux.per_image == 28 * flux.per_step + fixed


def test_savings_bound_each_family(flux):
    share = flux.forward.attention / flux.forward.total
    assert f"{share:.1%}" in flux.savings["attention"] and "Amdahl" in flux.savings["attention"]
    assert "fp8 peak" in flux.savings["quant"] and "compile" in flux.savings
    fp8 = compute("synthetic:flux.1-dev", 1024, 1024, 28, device="h200", dtype="fp8")
    linear = flux.forward.linear
    assert fp8.floor_step_s == pytest.approx(linear / 1979e12 + (flux.per_step - linear) / 989e12)
    text = format_text(flux)
    assert "74.38 TFLOP" in text and "floor per image" in text


def test_cli_prints_the_roofline_and_refuses_bad_input(monkeypatch, capsys):
    code, out, _ = invoke(
        monkeypatch, capsys, "roofline", "synthetic:flux.1-dev", "--height", "1024", "--width", "1024",
        "--steps", "28", "--device", "h100",
    )  # fmt: skip
    assert code == 0 and "denoiser forward:  74.38 TFLOP" in out and "on H100" in out
    code, _, err = invoke(monkeypatch, capsys, "roofline", "synthetic:flux.1-dev", "--device", "h300")
    assert code == 2 and "unknown device 'h300'" in err
    code, _, err = invoke(monkeypatch, capsys, "roofline", "tiny-flux")
    assert code == 2 and "not a synthetic source" in err
    with pytest.raises(ConfigError, match="--height: 1000 is not a positive multiple of 16"):
        compute("synthetic:flux.1-dev", 1000, 1024, 28)
