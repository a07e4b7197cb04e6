"""``python -m accel.docs_gen [--check] [--out DIR] [--plugins]``: regenerate (or check) the reference pages."""

from __future__ import annotations

import sys

from accel.docs_gen import main

sys.exit(main())
