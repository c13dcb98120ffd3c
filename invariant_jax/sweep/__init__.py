"""Many initializations at once: a continuous-batching engine for gradient flow,
per-trajectory statistics, persistence with resume, and sharding over devices.

- `sweep_flows(nets, X, Y, t1, ...)`: flows from a batch of networks, in memory.
- `run_sweep(config, out, ...)`: a `SweepConfig` run into a resumable results folder.
- `load_sweep(out)`, `summarize_sweep(config, result)`: read and summarise a sweep.
- `sweep_network(config_or_folder, i, final=False)`: the network of row `i`.
"""

from .._results import STATUSES, status_code, status_is, status_is_success
from ._columns import DERIVED, trajectory_columns
from ._config import BUILDERS, SweepConfig
from ._engine import EngineStats
from ._rows import sweep_network
from ._run import SweepResult, init_theta, load_sweep, run_sweep, sweep_flows
from ._summary import SweepSummary, summarize_sweep

__all__ = [
    "BUILDERS",
    "DERIVED",
    "STATUSES",
    "EngineStats",
    "SweepConfig",
    "SweepResult",
    "SweepSummary",
    "init_theta",
    "load_sweep",
    "run_sweep",
    "status_code",
    "status_is",
    "status_is_success",
    "summarize_sweep",
    "sweep_network",
    "trajectory_columns",
    "sweep_flows",
]
