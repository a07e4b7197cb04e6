"""Why a compiled float32 denoiser can differ from eager by more than rounding: the model's own low-precision casts.

Some models round values to bfloat16 (or float16) inside a float32 forward: Kandinsky 5's attention processor
rotates the query and key, rounds them to ``torch.bfloat16`` and casts them back (``apply_rotary``). Eager does
that rounding; inductor, by default (``torch._inductor.config.emulate_precision_casts = False``), keeps a fused
value in float32 and skips the round trip. Compiled and eager then differ by bfloat16 rounding of those values
(tiny-kandinsky5 at the coverage workload: PSNR 90 dB against a 100 dB lossless bar), which is the model's numerics
meeting inductor's documented default, not a compile defect. Measured on tiny-kandinsky5 (fp32, CPU, 8 steps, two
images): eager vs eager bit-identical; eager vs eager with every Linear's output moved by one float32 rounding
131 dB; aot_eager (dynamo, eager kernels) bit-identical; inductor 99 dB; inductor with
``emulate_precision_casts = True`` 131 dB (max diff 2.0e-5), as flux.1's compile (130 dB).
``low_precision_casts`` finds such casts in the source of a denoiser's module and attention-processor classes;
``precision_cast_note`` says it beside an out-of-parity compiled cell (the evidence's ``parity_note``).
"""

from __future__ import annotations

import inspect
import re
from typing import Any

# An explicit cast to a 16-bit float: .to(torch.bfloat16), .to(dtype=torch.float16), .bfloat16(), .half().
CAST = re.compile(r"\.to\(\s*(?:dtype\s*=\s*)?torch\.(?:bfloat16|float16|half)\s*\)|\.(?:bfloat16|half)\(\)")


def low_precision_casts(roots: dict[str, Any]) -> list[str]:
    """``Class: `cast` `` for every module or attention-processor class of the float32 denoisers in ``roots``
    whose source casts to a 16-bit float (torch's own classes are not scanned); sorted, empty when none."""
    import torch

    classes: dict[type, None] = {}
    for root in roots.values():
        first = next(iter(root.parameters()), None)
        if first is None or first.dtype != torch.float32:
            continue  # a model computing in 16 bits anyway: its casts are not a float32 model's rounding
        for module in root.modules():
            classes[type(module)] = None
            processor = getattr(module, "processor", None)
            if processor is not None:
                classes[type(processor)] = None
    found = []
    for cls in classes:
        if cls.__module__.split(".")[0] == "torch":
            continue
        try:
            source = inspect.getsource(cls)
        except (OSError, TypeError):  # defined interactively, or a C extension: nothing to read
            continue
        match = CAST.search(source)
        if match:
            found.append(f"{cls.__name__}: `{match.group(0).lstrip('.')}`")
    return sorted(found)


def precision_cast_note(casts: list[str], backend: str) -> str | None:
    """The parity note of a compiled cell whose float32 denoiser rounds to 16 bits itself (``casts``), under
    inductor without precision-cast emulation; None otherwise."""
    if not casts or backend != "inductor":
        return None
    import torch._inductor.config as inductor_config

    if inductor_config.emulate_precision_casts:
        return None
    return (
        f"the model rounds to 16 bits inside its float32 forward ({'; '.join(casts)}); inductor keeps those values in "
        "float32 (torch._inductor.config.emulate_precision_casts False, its default), so compiled and eager differ "
        "by that rounding, the model's numerics rather than a compile defect: re-run with "
        "TORCHINDUCTOR_EMULATE_PRECISION_CASTS=1 to check (it rounds as eager does)"
    )
