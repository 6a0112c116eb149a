"""Path checks shared by the writers."""

from __future__ import annotations

import os
from pathlib import Path


def writable_path(path: str | os.PathLike) -> Path:
    """`path` as a Path, or FileNotFoundError if its directory does not exist."""
    path = Path(path)
    if not path.parent.exists():
        raise FileNotFoundError(f"directory {str(path.parent)!r} does not exist (writing {str(path)!r})")
    return path
