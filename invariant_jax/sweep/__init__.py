"""Many initializations at once: a continuous-batching engine for gradient flow,
per-trajectory statistics, persistence with resume, and every local device.

- `sweep_flows(nets, X, Y, t1, ...)`: flows from a batch of networks, in memory.
- `run_sweep(config, out, ...)`: a `SweepConfig` run into a resumable results folder;
  `run_in_folder` does the same without loading the records back (for sweeps larger
  than memory: `summarize_sweep(config, out)` reads only the table's columns).
- `BatchOptions`, `StoreOptions`: how the engine runs a batch and how the folder is
  written (neither changes a number); `choose_device_mode`: exact or vmap mode and the
  slot count for the devices (`CPU_SLOTS`, `ACCELERATOR_SLOTS_PER_DEVICE`), as the CLI
  and `BatchOptions`' defaults choose them.
- `load_sweep(out)`, `summarize_sweep(config, result_or_folder)`: read and summarise a sweep.
- `sweep_network(config_or_folder, i, final=False)`: the network of row `i`.
- `Engine`, `KinkEngine` (both `SweepEngine`s) and `make_problem`: the engines
  themselves, for a caller that feeds its own queue of initializations (the benchmarks
  do); `sweep_flows` and `run_sweep` build and keep them.
- `ResultsStore` and the file helpers: the results folder, for the command line.
"""

from .._results import STATUSES, status_code, status_is, status_is_success
from ._columns import DERIVED, trajectory_columns
from ._config import BUILDERS, SweepConfig, graph_fields, init_theta, read_config_toml
from ._devices import ACCELERATOR_SLOTS_PER_DEVICE, CPU_SLOTS, choose_device_mode
from ._engine import Engine, EngineStats, SweepEngine, SweepProblem, make_problem
from ._engines import clear_engines
from ._flows import sweep_flows
from ._jobs import job_array_share
from ._kink import KinkEngine, resolve_kinks
from ._load import SweepStoreWarning, load_sweep
from ._options import BatchOptions, StoreOptions
from ._result import SweepResult, with_columns
from ._rows import sweep_network
from ._run import SweepInterrupted, manifest_for, run_in_folder, run_sweep
from ._store import (
    ResultsStore,
    atomic_write_json,
    check_output_file,
    check_output_folder,
    dumps_strict,
    is_no_space,
)
from ._summary import SweepSummary, summarize_sweep

__all__ = [
    "ACCELERATOR_SLOTS_PER_DEVICE",
    "BUILDERS",
    "CPU_SLOTS",
    "DERIVED",
    "STATUSES",
    "BatchOptions",
    "Engine",
    "EngineStats",
    "KinkEngine",
    "ResultsStore",
    "StoreOptions",
    "SweepConfig",
    "SweepEngine",
    "SweepInterrupted",
    "SweepProblem",
    "SweepResult",
    "SweepStoreWarning",
    "SweepSummary",
    "atomic_write_json",
    "check_output_file",
    "check_output_folder",
    "choose_device_mode",
    "clear_engines",
    "dumps_strict",
    "graph_fields",
    "init_theta",
    "is_no_space",
    "job_array_share",
    "load_sweep",
    "make_problem",
    "manifest_for",
    "read_config_toml",
    "resolve_kinks",
    "run_in_folder",
    "run_sweep",
    "status_code",
    "status_is",
    "status_is_success",
    "summarize_sweep",
    "sweep_network",
    "trajectory_columns",
    "sweep_flows",
    "with_columns",
]
