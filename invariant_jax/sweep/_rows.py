"""From a sweep's row back to objects: the network of initialization `i`, at its start
or where its flow stopped."""

from __future__ import annotations

import os
from pathlib import Path

import jax
import numpy as np

from ..network import DAGNetwork
from ._config import SweepConfig, init_theta
from ._load import load_sweep
from ._result import SweepResult


def sweep_network(sweep: SweepConfig | str | os.PathLike, index: int, *, final: bool = False) -> DAGNetwork:
    """The network of initialization `index` of a sweep: the one the engine started from,
    or (`final=True`) the one where its flow stopped.

    With a `SweepConfig` the initial network is rebuilt from the config alone (key
    `jax.random.fold_in(jax.random.key(config.seed), index)`, `config.init`,
    `config.scale`): its weights are bit-identical to the row's `theta0`. With a results
    folder both come from the row itself (`theta0`, `theta_final`). The data the flow
    trained on is `config.build_data()`; `ij.load_sweep(folder)` gives the config.

    ```python
    net0 = ij.sweep_network("runs/sweep", 17)              # the row with index 17
    net1 = ij.sweep_network("runs/sweep", 17, final=True)  # where its flow stopped
    ij.connectivity(net0.graph, ij.conserved_quantities(net0))
    ```

    **Arguments:**

    - `sweep`: a `SweepConfig`, or a results folder written by `ij.run_sweep` /
        `invariant-jax sweep`.
    - `index`: the initialization index `i` (the `index` column), `0 <= i < n_inits`.
    - `final`: return the network at `t_final` instead (needs a results folder).

    **Returns:** a `DAGNetwork` on `config.build_graph()` with `config.activation`.
    """
    if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
        raise TypeError(f"index must be an integer initialization index; got {index!r}.")
    if isinstance(sweep, SweepConfig):
        config, result = sweep, None
        if final:
            raise ValueError(
                "final=True needs the sweep's results: pass its results folder (the --out of "
                "`invariant-jax sweep`, the `out` of ij.run_sweep) instead of the SweepConfig."
            )
    elif isinstance(sweep, (str, os.PathLike)):
        config, result = load_sweep(Path(sweep))
    else:
        raise TypeError(f"sweep must be a SweepConfig or a results folder; got {type(sweep).__name__}.")
    if not 0 <= int(index) < config.n_inits:
        raise ValueError(f"index {index} is outside the sweep's initializations 0 .. {config.n_inits - 1}.")
    graph = config.build_graph()
    theta: jax.Array | np.ndarray
    if result is None:
        theta = init_theta(config, graph, int(index))
    else:
        theta = row_weights(result, int(index), final=final, folder=sweep)
    return DAGNetwork(graph, config.activation, edge_weights=theta)


def row_weights(result: SweepResult, index: int, *, final: bool = False, folder=None) -> np.ndarray:
    """`theta0` (or `theta_final`) of the record with initialization index `index`.

    **Raises:** `ValueError` when the sweep has no record of `index` yet (say how to
    finish it)."""
    rows = np.flatnonzero(np.asarray(result.index) == index)
    if rows.size == 0:
        where = f" in {str(folder)!r}" if folder is not None else ""
        raise ValueError(
            f"Initialization {index} has no record{where} yet; finish the sweep with "
            "`invariant-jax sweep --resume --out DIR` (or ij.run_sweep(config, out, resume=True))."
        )
    return np.asarray((result.theta_final if final else result.theta0)[rows[0]])
