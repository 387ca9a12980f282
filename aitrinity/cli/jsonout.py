"""The one way the CLI prints ``--json``: indented, strict (no NaN or infinity), the same for every command."""

from __future__ import annotations

import json
from typing import Any


def dump(obj: Any) -> str:
    return json.dumps(obj, indent=2, allow_nan=False, default=str)
