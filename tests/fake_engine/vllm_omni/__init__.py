"""A stand-in for vLLM-Omni's offline API (``Omni``), to test engine cells without its environment.

It records the keyword arguments it was built with (``FAKE_OMNI_RECORD``: a JSONL file), prints
``FAKE_OMNI_LOG`` to stderr as the engine's log, raises ``FAKE_OMNI_ERROR`` as an initialisation failure,
and returns a flat image whose shade is ``FAKE_OMNI_SHADE`` (0-255; default 100).
"""

from __future__ import annotations

import json
import os
import sys
from types import SimpleNamespace


class Omni:
    def __init__(self, model: str, **kwargs):
        record = os.environ.get("FAKE_OMNI_RECORD")
        if record:
            with open(record, "a") as handle:
                handle.write(json.dumps({"model": model, **kwargs}) + "\n")
        sys.stderr.write(os.environ.get("FAKE_OMNI_LOG", ""))
        if os.environ.get("FAKE_OMNI_ERROR"):
            raise RuntimeError(os.environ["FAKE_OMNI_ERROR"])

    def generate(self, prompts, params, use_tqdm=False):
        from PIL import Image

        shade = int(os.environ.get("FAKE_OMNI_SHADE", "100"))
        return [SimpleNamespace(images=[Image.new("RGB", (params.width, params.height), (shade,) * 3)])]

    def close(self) -> None:
        pass
