"""Reading and writing initial conditions.

`write(ic, path)` / `read(path)`: progenax's own schema in HDF5 (`.h5`, `.hdf5`)
or `.npz`; see `progenax.io.native` for the schema. `format=` ("gadget"/"swift",
"nbody6"/"petar", "csv", "amuse", see `FORMATS`) picks an exchange format instead:
`progenax.io.gadget`, `progenax.io.nbody`, `progenax.io.csv`, `progenax.io.amuse`
(AMUSE particle sets, `to_amuse(ic)`; only when AMUSE is installed).
`format_summary(ic)` describes a cluster in a few lines (what `progenax info` prints;
`summary_figures` measures its figures, `write(..., summary=)` keeps them in the
file and `stored_summary` reads them back);
`progenax.io.recipe` holds how a cluster was built (the recipe every file stores).
Every writer is atomic (a temporary file beside the target, renamed over it:
a failed or killed write leaves the old file) and refuses NaN or inf
(`check_finite_arrays`).
"""

from . import recipe as recipe
from ._paths import check_finite_arrays as check_finite_arrays
from .amuse import read_amuse as read_amuse
from .amuse import to_amuse as to_amuse
from .amuse import write_amuse as write_amuse
from .csv import read_csv as read_csv
from .csv import write_csv as write_csv
from .gadget import read_gadget as read_gadget
from .gadget import write_gadget as write_gadget
from .native import EXTENSIONS as EXTENSIONS
from .native import FORMATS as FORMATS
from .native import SCHEMA as SCHEMA
from .native import SCHEMA_VERSION as SCHEMA_VERSION
from .native import file_format as file_format
from .native import read as read
from .native import stored_summary as stored_summary
from .native import write as write
from .nbody import read_nbody6 as read_nbody6
from .nbody import write_nbody6 as write_nbody6
from .summary import format_summary as format_summary
from .summary import summary_figures as summary_figures
from .summary import summary_line as summary_line

__all__ = [
    # native schema
    "EXTENSIONS",
    "SCHEMA",
    "SCHEMA_VERSION",
    "file_format",
    "read",
    "write",
    # exchange formats
    "FORMATS",
    "read_amuse",
    "read_csv",
    "read_gadget",
    "read_nbody6",
    "to_amuse",
    "write_amuse",
    "write_csv",
    "write_gadget",
    "write_nbody6",
    # checks
    "check_finite_arrays",
    # summaries
    "format_summary",
    "stored_summary",
    "summary_figures",
    "summary_line",
    # recipes (`progenax build --config`, `progenax info`)
    "recipe",
]
