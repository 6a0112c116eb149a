"""Reading and writing initial conditions.

`write(ic, path)` / `read(path)`: progenax's own schema in HDF5 (`.h5`, `.hdf5`)
or `.npz`; see `progenax.io.native` for the schema. `format_summary(ic)` describes
a cluster in a few lines (what `progenax info` prints).
"""

from .native import EXTENSIONS as EXTENSIONS
from .native import SCHEMA as SCHEMA
from .native import SCHEMA_VERSION as SCHEMA_VERSION
from .native import file_format as file_format
from .native import read as read
from .native import write as write
from .summary import format_summary as format_summary
from .summary import summary_line as summary_line

__all__ = [
    # native schema
    "EXTENSIONS",
    "SCHEMA",
    "SCHEMA_VERSION",
    "file_format",
    "read",
    "write",
    # summaries
    "format_summary",
    "summary_line",
]
