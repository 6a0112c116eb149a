"""Keywords kept for one release under their old names.

A renamed keyword keeps working for one release: passing the old name gives
a `FutureWarning` (shown to users by default, unlike `DeprecationWarning`)
that names the new one, and passing both is an error.
"""

from __future__ import annotations

import warnings
from typing import Any

REMOVAL = "0.3.0"


def renamed_keyword(function: str, old: str, old_value: Any, new: str, new_value: Any, *, unset: Any = None) -> Any:
    """The value of keyword `new`, taking the deprecated `old` into account.

    `old_value` is what the caller passed under the old name (`None` when not
    passed); `new_value` is the new keyword's value and `unset` its default.
    """
    if old_value is None:
        return new_value
    if new_value is not unset and new_value is not None:
        raise TypeError(f"{function}: pass {new}= only ({old}= is its deprecated old name)")
    warnings.warn(
        f"{function}: {old}= is deprecated and will be removed in {REMOVAL}; use {new}=",
        FutureWarning,
        stacklevel=3,
    )
    return old_value
