"""`SweepConfig`: everything that defines a sweep's results, validated before any work."""

from __future__ import annotations

import dataclasses
import os
import tomllib
from pathlib import Path
from typing import Any

import jax
import jax.random as jr
import numpy as np

from .._defaults import MAX_STEPS
from ..activations import ACTIVATIONS
from ..datasets import teacher_student
from ..graph import DAG, example_dag, mlp, random_dag
from ..network import INITIALIZERS, init_edge_weights
from ..options import KinkOptions, SaveTimes, SolverOptions, StopRules, check_integer, check_positive
from ._kink import resolve_kinks

BUILDERS = ("example", "mlp", "random", "edges")

_KINK_FIELDS = ("max_events", "max_sliding", "event_tol", "surface_tol")  # those of KinkOptions
_KINK_DEFAULTS = {name: getattr(KinkOptions(), name) for name in _KINK_FIELDS}


def read_config_toml(path: str | os.PathLike) -> dict[str, Any]:
    """The options of a TOML config file: `key = value` lines, or all of them in one
    `[sweep]` table. A UTF-8 byte-order mark is skipped. The one reader of config files:
    `SweepConfig.from_toml` and the CLI's `--config` both use it.

    **Arguments:**

    - `path`: the TOML file.

    **Returns:** the options as a dict (not yet validated: `SweepConfig.from_dict` does that).

    **Raises:** `ValueError` naming the file for a directory, a binary file, a TOML
    syntax error, keys beside the `[sweep]` table, or another table;
    `FileNotFoundError` if there is no such file."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"Config file {str(path)!r} is a directory; give a TOML file of sweep options.")
    if not path.is_file():
        raise FileNotFoundError(f"Config file {str(path)!r} does not exist.")
    data = path.read_bytes()
    bad = data.find(b"\x00")
    if bad < 0:
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as e:
            bad = e.start
    if bad >= 0:
        line = data.count(b"\n", 0, bad) + 1
        raise ValueError(f"Config file {str(path)!r} is not a text file (line {line}, byte {bad}: "
                         f"{'a NUL byte' if data[bad] == 0 else 'not UTF-8'}); give a TOML file of sweep options.")
    try:
        d = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"Config file {str(path)!r} is not valid TOML: {e}.") from None
    tables = sorted(k for k, v in d.items() if isinstance(v, dict))
    if "sweep" in d:
        beside = sorted(k for k in d if k != "sweep" and not isinstance(d[k], dict))
        if beside:
            raise ValueError(f"Config file {str(path)!r}: keys {beside} sit beside the [sweep] table and would be "
                             "ignored; move them into [sweep] (or drop the [sweep] header).")
    other = [t for t in tables if t != "sweep"]
    if other:
        raise ValueError(f"Config file {str(path)!r}: unknown table(s) {['[' + t + ']' for t in other]}; the only "
                         "table is [sweep] (or give the keys at the top level).")
    return dict(d.get("sweep", d))


def graph_fields(graph: str | os.PathLike | DAG) -> dict[str, Any]:
    """The `SweepConfig` fields that describe `graph`: a `DAG`, or the path of an
    edge-list file (`DAG.from_file`; a string that names an existing file or has a
    suffix), as `graph="edges"` with `edges`, `inputs`, `outputs`, `constants` (labels as
    strings). Any other value is returned as `{"graph": value}` for `SweepConfig` to
    judge."""
    if isinstance(graph, (str, os.PathLike)) and not (isinstance(graph, str) and graph in BUILDERS):
        path = Path(graph)
        if path.exists() or path.suffix:
            graph = DAG.from_file(path)
    if not isinstance(graph, DAG):
        return {"graph": graph}
    constants = set(graph.constants)
    d = {"graph": "edges", "edges": tuple((str(u), str(v)) for u, v in graph.edges),
         "inputs": tuple(str(v) for v in graph.inputs if v not in constants),
         "outputs": tuple(str(v) for v in graph.outputs), "constants": tuple(str(v) for v in graph.constants)}
    hidden = tuple(str(v) for v in graph.hidden)
    default = DAG.from_edges(d["edges"], inputs=d["inputs"], outputs=d["outputs"], constants=d["constants"])
    if default.hidden != hidden:  # only where the edge list alone would order them otherwise
        d["hidden"] = hidden
    return d


@dataclasses.dataclass(frozen=True, kw_only=True)
class SweepConfig:
    """The full definition of a sweep. Two sweeps with equal configs give equal results
    (trajectory `i` starts from the key `fold_in(key(seed), i)`).

    **Fields:**

    - `graph`: builder: `"example"` (`ij.example_dag()`: skip connections and an
        out-bottleneck), `"mlp"` (uses `widths`, `bias`), `"random"` (uses `n_inputs`,
        `n_hidden`, `n_outputs`, `edge_prob`, `graph_seed`, `bias`) or `"edges"` (an
        explicit edge list in `edges`, `inputs`, `outputs`, `constants`, and optionally
        `hidden`, which fixes the order of hidden nodes within a level). It may also be
        given as an `ij.DAG` or the path of an edge-list file (`ij.DAG.from_file`), in
        Python as in a TOML file: the config then holds it as `graph="edges"` and its
        edge list, so the config hash depends on the graph, not on the file name.
    - `activation`, `init`, `scale`: the student networks (`ij.DAGNetwork`).
    - `n_samples`, `data_seed`, `teacher_activation`: teacher-student data
        (`ij.teacher_student`; the teacher uses `activation` unless given).
    - `n_inits`, `seed`: initialization `i` uses `jax.random.fold_in(key(seed), i)`.
    - `t1`, `loss`, `weight_decay`: as in `ij.gradient_flow` (MSE time scale:
        `L = (1/2N) sum ||f - y||^2`).
    - `solver`, `rtol`, `atol`, `max_steps`: the fields of `ij.SolverOptions`
        (`config.solver_options`); `n_save`: of `ij.SaveTimes` (`config.save_times`);
        `grad_norm_tol`, `loss_floor`, `max_param_norm`: of `ij.StopRules`
        (`config.stop_rules`). Validated by those objects, as everywhere else.
    - `kink_aware`: integrate with `ij.kink_aware_flow` (relu / leaky_relu only; `solver`
        is then the solver inside each activation pattern; no stopping rules or weight
        decay). `None` (the default) resolves on construction: `True` for relu /
        leaky_relu (the exact method) unless a stopping rule or weight decay is set,
        `False` otherwise. Set `False` to opt out.
    - `max_events`, `max_sliding`, `event_tol`, `surface_tol`: the fields of
        `ij.KinkOptions` (`config.kink_options`), for kink-aware sweeps only. At their
        defaults they are left out of `to_dict()` (and so of the config hash), so that
        folders written before these fields existed still resume.
    """

    graph: str = "example"
    widths: tuple[int, ...] = (5, 8, 1)
    bias: bool = False
    n_inputs: int = 3
    n_hidden: int = 8
    n_outputs: int = 1
    edge_prob: float = 0.4
    graph_seed: int = 0
    edges: tuple[tuple[str, str], ...] = ()
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    constants: tuple[str, ...] = ()
    hidden: tuple[str, ...] = ()
    activation: str = "relu"
    init: str = "glorot"
    scale: float = 1.0
    n_samples: int = 20
    data_seed: int = 1
    teacher_activation: str | None = None
    n_inits: int = 256
    seed: int = 0
    t1: float = 1.0
    solver: str = "tsit5"
    rtol: float = 1e-8
    atol: float = 1e-8
    max_steps: int = MAX_STEPS
    n_save: int = 101
    grad_norm_tol: float | None = None
    loss_floor: float | None = None
    max_param_norm: float | None = None
    loss: str = "mse"
    weight_decay: float = 0.0
    kink_aware: bool | None = None
    max_events: int = _KINK_DEFAULTS["max_events"]
    max_sliding: int = _KINK_DEFAULTS["max_sliding"]
    event_tol: float = _KINK_DEFAULTS["event_tol"]
    surface_tol: float = _KINK_DEFAULTS["surface_tol"]

    def __post_init__(self):
        if not (isinstance(self.graph, str) and self.graph in BUILDERS):
            for name, value in graph_fields(self.graph).items():
                if name != "graph" and getattr(self, name):
                    raise ValueError(f"graph={self.graph!r} gives the graph; drop {name}= (or use "
                                     "graph='edges' with edges=, inputs=, outputs=).")
                object.__setattr__(self, name, value)
        for name in ("widths", "edges", "inputs", "outputs", "constants", "hidden"):
            v = getattr(self, name)
            if name == "edges":
                v = tuple(tuple(str(x) for x in e) for e in v)
            elif name == "widths":
                v = tuple(v)
            else:
                v = tuple(str(x) for x in v)
            object.__setattr__(self, name, v)
        if self.kink_aware is None and self.activation in ACTIVATIONS:
            auto = resolve_kinks(None, kinked=ACTIVATIONS[self.activation].kinked, options=self.solver_options,
                                 stop=self.stop_rules, weight_decay=self.weight_decay)
            object.__setattr__(self, "kink_aware", auto is not None)
        self.validate()

    def validate(self) -> None:
        """Raise `ValueError` (or `TypeError`) for anything that would fail later. The
        solver, save-time and stopping options are checked by the option objects
        themselves (`solver_options`, `save_times`, `stop_rules`), exactly as
        `gradient_flow` checks them."""
        if self.graph not in BUILDERS:
            raise ValueError(f"Unknown graph builder {self.graph!r}; choose one of {list(BUILDERS)}, the path "
                             "of an edge-list file (one with a suffix such as .txt; format: ij.DAG.from_file) "
                             "or an ij.DAG.")
        for name in ("activation",) + (("teacher_activation",) if self.teacher_activation else ()):
            act = getattr(self, name)
            if act not in ACTIVATIONS:
                raise ValueError(f"Unknown {name} {act!r}; choose one of {sorted(ACTIVATIONS)}.")
        if self.init not in INITIALIZERS:
            raise ValueError(f"Unknown init {self.init!r}; choose one of {list(INITIALIZERS)}.")
        for name in ("bias", "kink_aware"):
            if not isinstance(getattr(self, name), bool | np.bool_):
                raise TypeError(f"{name} must be true or false; got {getattr(self, name)!r}.")
        if len(self.widths) < 2:
            raise ValueError(f"widths must list at least an input and an output width; got {list(self.widths)}.")
        for w in self.widths:
            check_integer("each of widths", w, minimum=1)
        for name, minimum in (("n_inits", 1), ("n_samples", 1), ("n_inputs", 1), ("n_hidden", 0),
                              ("n_outputs", 1), ("seed", 0), ("data_seed", 0), ("graph_seed", 0)):
            check_integer(name, getattr(self, name), minimum=minimum)
        check_positive("edge_prob", self.edge_prob, allow_zero=True)
        if self.edge_prob > 1:
            raise ValueError(f"edge_prob must be a probability in [0, 1]; got {self.edge_prob!r}.")
        check_positive("scale", self.scale)
        check_positive("t1", self.t1)
        check_positive("weight_decay", self.weight_decay, allow_zero=True)
        options, _, stop = self.solver_options, self.save_times, self.stop_rules
        options.check_dtype(np.float64)  # sweeps run in float64 (run_sweep checks x64 is on)
        if self.loss not in ("mse", "bce"):
            raise ValueError(f"Unknown loss {self.loss!r}; choose 'mse' or 'bce'.")
        if self.kink_aware:
            if not ACTIVATIONS[self.activation].kinked:
                raise ValueError(f"kink_aware needs a piecewise-linear activation (relu, leaky_relu); got "
                                 f"{self.activation!r}. For smooth activations set kink_aware = false.")
            resolve_kinks(True, kinked=True, options=options, stop=stop, weight_decay=self.weight_decay)
        kinks = self.kink_options
        if not self.kink_aware and kinks != KinkOptions():
            set_ = [n for n in _KINK_FIELDS if getattr(self, n) != _KINK_DEFAULTS[n]]
            raise ValueError(f"{', '.join(set_)} only apply to kink-aware sweeps; drop "
                             f"{'it' if len(set_) == 1 else 'them'} or set kink_aware = true.")
        if self.graph == "edges" and not (self.edges and self.inputs and self.outputs):
            raise ValueError("graph='edges' needs `edges`, `inputs` and `outputs`.")

    @property
    def solver_options(self) -> SolverOptions:
        """`SolverOptions(solver, rtol, atol, max_steps)` of this sweep."""
        return SolverOptions(self.solver, rtol=self.rtol, atol=self.atol, max_steps=self.max_steps)

    @property
    def save_times(self) -> SaveTimes:
        """`SaveTimes(n_save=n_save)` (linearly spaced from 0 to `t1`)."""
        return SaveTimes(n_save=self.n_save)

    @property
    def stop_rules(self) -> StopRules:
        """`StopRules(grad_norm_tol, loss_floor, max_param_norm)` of this sweep."""
        return StopRules(grad_norm_tol=self.grad_norm_tol, loss_floor=self.loss_floor,
                         max_param_norm=self.max_param_norm)

    @property
    def kink_options(self) -> KinkOptions:
        """`KinkOptions(max_events, max_sliding, event_tol, surface_tol)` of this sweep."""
        return KinkOptions(max_events=self.max_events, max_sliding=self.max_sliding, event_tol=self.event_tol,
                           surface_tol=self.surface_tol)

    # ------------------------------------------------------------------ io

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON-ready values; the `KinkOptions` fields only where they differ
        from their defaults, and `hidden` only when set (so the config hash of a sweep that
        does not set them is the one it had before they existed)."""
        d = dataclasses.asdict(self)
        d = {k: v for k, v in d.items() if not (k in _KINK_DEFAULTS and v == _KINK_DEFAULTS[k])
             and not (k == "hidden" and not v)}
        return {k: (list(map(list, v)) if k == "edges" else list(v) if isinstance(v, tuple) else v)
                for k, v in d.items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SweepConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"Unknown sweep config key(s) {unknown}; known keys: {sorted(names)}.")
        return cls(**d)

    @classmethod
    def from_toml(cls, path: str | Path, **overrides) -> SweepConfig:
        """Read a TOML file of `key = value` lines, or all of them in one `[sweep]` table
        (`read_config_toml`: keys beside the `[sweep]` table, other tables, a binary file, a
        byte-order mark and syntax errors follow its rules).

        **Arguments:**

        - `path`: the TOML file.
        - `overrides`: options that replace the file's.

        **Returns:** a `SweepConfig`.
        """
        return cls.from_dict({**read_config_toml(path), **overrides})

    # ------------------------------------------------------------------ building

    def build_graph(self) -> DAG:
        """The sweep's `DAG` (the same object for equal configs: `DAG`s compare by structure)."""
        if self.graph == "example":
            return example_dag()
        if self.graph == "mlp":
            return mlp(list(self.widths), bias=self.bias)
        if self.graph == "random":
            return random_dag(self.n_inputs, self.n_hidden, self.n_outputs, self.edge_prob,
                              self.graph_seed, bias=self.bias)
        return DAG.from_edges(list(self.edges), inputs=list(self.inputs), outputs=list(self.outputs),
                              constants=list(self.constants), hidden=list(self.hidden))

    def build_data(self, graph: DAG | None = None):
        """The teacher-student data `(X, Y)` every trajectory of the sweep trains on
        (`ij.teacher_student` with key `jax.random.key(data_seed)`).

        **Arguments:**

        - `graph`: `build_graph()` (default: built here).

        **Returns:** `(X, Y)`, shapes `(n_samples, d_in)` and `(n_samples, d_out)`.
        """
        graph = self.build_graph() if graph is None else graph
        X, Y, _ = teacher_student(graph, int(self.n_samples), key=jr.key(self.data_seed),
                                  activation=self.teacher_activation or self.activation)
        return X, Y


def init_theta(config: SweepConfig, graph: DAG, index) -> jax.Array:
    """Initial edge weights of initialization `index`: the key is
    `jax.random.fold_in(jax.random.key(config.seed), index)`, so a trajectory does not
    depend on how the sweep is split. Equals `DAGNetwork(graph, activation,
    key=that_key, init=config.init, scale=config.scale).edge_weights()`."""
    key = jr.fold_in(jr.key(config.seed), index)
    return init_edge_weights(graph, key, config.init, scale=config.scale)
