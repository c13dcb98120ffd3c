"""`SweepConfig`: everything that defines a sweep's results, validated before any work."""

from __future__ import annotations

import dataclasses
import json
import os
import tomllib
import warnings
from pathlib import Path
from typing import Any

import jax
import jax.random as jr
import numpy as np

from .._checks import take_deprecated
from ..activations import ACTIVATIONS
from ..datasets import teacher_student
from ..graph import DAG, example_dag, mlp, random_dag
from ..network import INITIALIZERS, init_edge_weights
from ..options import KinkOptions, Objective, SaveTimes, SolverOptions, StopRules, check_integer, check_positive
from ._kink import resolve_kinks

BUILDERS = ("example", "mlp", "random", "edges")

_KINK_FIELDS = ("max_events", "max_sliding", "event_tol", "surface_tol")  # those of KinkOptions
_KINK_DEFAULTS = {name: getattr(KinkOptions(), name) for name in _KINK_FIELDS}
_OBJECT_FIELDS = ("solver", "saveat", "stop", "loss", "kinks")

TABLES = {
    "solver": ("solver", SolverOptions, ("solver", "rtol", "atol", "max_steps")),
    "save": ("saveat", SaveTimes, ("n_save",)),
    "stop": ("stop", StopRules, ("grad_norm_tol", "loss_floor", "max_param_norm")),
    "objective": ("loss", Objective, ("loss", "weight_decay")),
    "kinks": ("kinks", KinkOptions, ("kink_aware",) + _KINK_FIELDS),
}
"""TOML table -> (the `SweepConfig` field that holds its option object, the object's
class, the keys the table takes: the object's fields, as the CLI's flags spell them)."""

FLAT_KEYS = tuple(k for _, _, keys in TABLES.values() for k in keys)
"""The keys of the option tables: flat keys of stored configs and of the command line."""

_FLAT_HINTS = {
    k: f"pass {field}=ij.{cls.__name__}({k}=...) instead" for field, cls, keys in TABLES.values() for k in keys
}
_FLAT_HINTS["kink_aware"] = "pass kinks=True / kinks=False (or kinks=ij.KinkOptions(...)) instead"
_NAMED = {"solver": "solver", "loss": "loss"}  # object fields that also take a name (str)


def read_config_toml(path: str | os.PathLike) -> dict[str, Any]:
    """The options of a TOML config file: `key = value` lines (or all of them in one
    `[sweep]` table), with each option object in its table: `[solver]` (`solver`, `rtol`,
    `atol`, `max_steps`), `[save]` (`n_save`), `[stop]` (`grad_norm_tol`, `loss_floor`,
    `max_param_norm`), `[objective]` (`loss`, `weight_decay`), `[kinks]` (`kink_aware`,
    `max_events`, `max_sliding`, `event_tol`, `surface_tol`); `SweepConfig.to_toml()`
    writes this form. The flat form of earlier versions (those keys at the top level) is
    still read, with a `DeprecationWarning` naming the tables. A UTF-8 byte-order mark is
    skipped. The one reader of config files: `SweepConfig.from_toml` and the CLI's
    `--config` both use it.

    **Arguments:**

    - `path`: the TOML file.

    **Returns:** the options as a flat dict (the tables' keys among the others; not yet
    validated: `SweepConfig.from_dict` does that).

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
        raise ValueError(
            f"Config file {str(path)!r} is not a text file (line {line}, byte {bad}: "
            f"{'a NUL byte' if data[bad] == 0 else 'not UTF-8'}); give a TOML file of sweep options."
        )
    try:
        d = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"Config file {str(path)!r} is not valid TOML: {e}.") from None
    if "sweep" in d:
        beside = sorted(k for k in d if k != "sweep" and not isinstance(d[k], dict))
        if beside:
            raise ValueError(
                f"Config file {str(path)!r}: keys {beside} sit beside the [sweep] table and would be "
                "ignored; move them into [sweep] (or drop the [sweep] header)."
            )
    body = {**{k: v for k, v in d.items() if k != "sweep"}, **d.get("sweep", {})}
    other = sorted(k for k, v in body.items() if isinstance(v, dict) and k not in TABLES)
    if other:
        raise ValueError(
            f"Config file {str(path)!r}: unknown table(s) {['[' + t + ']' for t in other]}; the "
            f"tables are [sweep] (or give its keys at the top level) and the option tables "
            f"{', '.join('[' + t + ']' for t in TABLES)}."
        )
    return _flatten_tables(body, path)


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
    d: dict[str, Any] = {
        "graph": "edges",
        "edges": tuple((str(u), str(v)) for u, v in graph.edges),
        "inputs": tuple(str(v) for v in graph.inputs if v not in constants),
        "outputs": tuple(str(v) for v in graph.outputs),
        "constants": tuple(str(v) for v in graph.constants),
    }
    hidden = tuple(str(v) for v in graph.hidden)
    default = DAG.from_edges(d["edges"], inputs=d["inputs"], outputs=d["outputs"], constants=d["constants"])
    if default.hidden != hidden:  # only where the edge list alone would order them otherwise
        d["hidden"] = hidden
    return d


@dataclasses.dataclass(frozen=True, kw_only=True, init=False)
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
    - `t1`: as in `ij.gradient_flow` (MSE time scale: `L = (1/2N) sum ||f - y||^2`).
    - `solver`: an `ij.SolverOptions` (a solver *name*, `rtol`, `atol`, `max_steps`), or
        a solver name.
    - `saveat`: an `ij.SaveTimes(n_save=...)` (the times at which the drift of `c` is
        checked, linearly spaced).
    - `stop`: an `ij.StopRules` (`grad_norm_tol`, `loss_floor`, `max_param_norm`; no wall
        time, which would make results depend on the machine).
    - `loss`: an `ij.Objective` (a loss name and weight decay), or a loss name.
    - `kinks`: integrate with `ij.kink_aware_flow` (relu / leaky_relu only; `solver` is
        then the solver inside each activation pattern; no stopping rules or weight
        decay): `True` or an `ij.KinkOptions`; `False` opts out. `None` (the default)
        resolves on construction (`ij.sweep.resolve_kinks`, as `sweep_flows` does): on for
        relu / leaky_relu (the exact method) unless a stopping rule or weight decay is
        set, off otherwise. The config then holds a `KinkOptions` or `False`.

    Each option object is validated by itself, as everywhere else. The flat keywords of
    earlier versions (`rtol`, `atol`, `max_steps`, `n_save`, `grad_norm_tol`,
    `loss_floor`, `max_param_norm`, `weight_decay`, `kink_aware`, `max_events`,
    `max_sliding`, `event_tol`, `surface_tol`) still work, with a `DeprecationWarning`,
    and remain readable as properties. `to_dict()` (the stored form, and the config hash)
    keeps them flat, so folders written by earlier versions still load and resume; a TOML
    file nests them as tables (`read_config_toml`).
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
    solver: SolverOptions = SolverOptions()
    saveat: SaveTimes = SaveTimes()
    stop: StopRules = StopRules()
    loss: Objective = Objective()
    kinks: KinkOptions | bool | None = None

    def __init__(self, **kwargs):
        flat = {k: kwargs.pop(k) for k in FLAT_KEYS if k in kwargs and k not in _NAMED}
        take_deprecated("SweepConfig", flat, _FLAT_HINTS)
        self._setup(kwargs, flat)

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        """Every key `from_dict` takes: the fields and the option tables' flat keys."""
        return tuple(dict.fromkeys([f.name for f in dataclasses.fields(cls)] + list(FLAT_KEYS)))

    def _setup(self, given: dict, flat: dict) -> None:
        unknown = sorted(set(given) - {f.name for f in dataclasses.fields(self)})
        if unknown:
            raise TypeError(f"SweepConfig() got unexpected keyword argument(s) {', '.join(map(repr, unknown))}.")
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, given.get(f.name, f.default))
        for field, cls, keys in TABLES.values():
            if field != "kinks":
                value = _fold(field, cls, keys, getattr(self, field), field in given, flat)
                if not isinstance(value, cls):
                    raise TypeError(f"{field} must be an ij.{cls.__name__}; got {value!r}.")
                object.__setattr__(self, field, value)
        self._normalize_graph()
        self._set_kinks("kinks" in given, flat)
        self.validate()

    def _normalize_graph(self) -> None:
        if not (isinstance(self.graph, str) and self.graph in BUILDERS):
            for name, value in graph_fields(self.graph).items():
                if name != "graph" and getattr(self, name):
                    raise ValueError(
                        f"graph={self.graph!r} gives the graph; drop {name}= (or use "
                        "graph='edges' with edges=, inputs=, outputs=)."
                    )
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

    def _set_kinks(self, explicit: bool, flat: dict) -> None:
        """Resolve `kinks` (or the flat `kink_aware` and `KinkOptions` keys) to a
        `KinkOptions` (kink-aware) or `False`, by `resolve_kinks`."""
        aware = flat.pop("kink_aware", None)
        fields = {k: flat.pop(k) for k in _KINK_FIELDS if k in flat}
        if explicit and (aware is not None or fields):
            raise ValueError(
                "Pass kink_aware and the KinkOptions fields inside kinks=KinkOptions(...) (or "
                "kinks=False), not as keywords as well."
            )
        if aware is not None and not isinstance(aware, bool | np.bool_):
            raise TypeError(f"kink_aware must be true or false; got {aware!r}.")
        ask = self.kinks if explicit else None if aware is None else (KinkOptions(**fields) if aware else False)
        if ask is not None and not isinstance(ask, bool | np.bool_ | KinkOptions):
            raise TypeError(f"kinks must be an ij.KinkOptions, True, False or None (auto); got {ask!r}.")
        ask = bool(ask) if isinstance(ask, np.bool_) else ask
        act = ACTIVATIONS.get(self.activation)
        if act is not None and not (ask not in (None, False) and not act.kinked):  # else validate() says why
            ask = resolve_kinks(
                ask, kinked=act.kinked, options=self.solver, stop=self.stop, weight_decay=self.loss.weight_decay
            )
            if ask is not None and aware is None and fields:  # auto turned on: with the given fields
                ask = KinkOptions(**fields)
        if not isinstance(ask, KinkOptions) and fields and KinkOptions(**fields) != KinkOptions():
            set_ = [n for n in _KINK_FIELDS if fields.get(n, _KINK_DEFAULTS[n]) != _KINK_DEFAULTS[n]]
            raise ValueError(
                f"{', '.join(set_)} only apply to kink-aware sweeps; drop "
                f"{'it' if len(set_) == 1 else 'them'} or set kink_aware = true."
            )
        object.__setattr__(self, "kinks", KinkOptions() if ask is True else False if ask is None else ask)

    def validate(self) -> None:
        """Raise `ValueError` (or `TypeError`) for anything that would fail later. The
        option objects check their own fields on construction, exactly as for
        `gradient_flow`; here, what a stored sweep needs of them (names, not objects)."""
        if self.graph not in BUILDERS:
            raise ValueError(
                f"Unknown graph builder {self.graph!r}; choose one of {list(BUILDERS)}, the path "
                "of an edge-list file (one with a suffix such as .txt; format: ij.DAG.from_file) "
                "or an ij.DAG."
            )
        for name in ("activation",) + (("teacher_activation",) if self.teacher_activation else ()):
            act = getattr(self, name)
            if act not in ACTIVATIONS:
                raise ValueError(f"Unknown {name} {act!r}; choose one of {sorted(ACTIVATIONS)}.")
        if self.init not in INITIALIZERS:
            raise ValueError(f"Unknown init {self.init!r}; choose one of {list(INITIALIZERS)}.")
        if not isinstance(self.bias, bool | np.bool_):
            raise TypeError(f"bias must be true or false; got {self.bias!r}.")
        if len(self.widths) < 2:
            raise ValueError(f"widths must list at least an input and an output width; got {list(self.widths)}.")
        for w in self.widths:
            check_integer("each of widths", w, minimum=1)
        for name, minimum in (
            ("n_inits", 1),
            ("n_samples", 1),
            ("n_inputs", 1),
            ("n_hidden", 0),
            ("n_outputs", 1),
            ("seed", 0),
            ("data_seed", 0),
            ("graph_seed", 0),
        ):
            check_integer(name, getattr(self, name), minimum=minimum)
        check_positive("edge_prob", self.edge_prob, allow_zero=True)
        if self.edge_prob > 1:
            raise ValueError(f"edge_prob must be a probability in [0, 1]; got {self.edge_prob!r}.")
        check_positive("scale", self.scale)
        check_positive("t1", self.t1)
        self._check_options()
        if self.kink_aware:
            if not ACTIVATIONS[self.activation].kinked:
                raise ValueError(
                    f"kink_aware needs a piecewise-linear activation (relu, leaky_relu); got "
                    f"{self.activation!r}. For smooth activations set kink_aware = false."
                )
            resolve_kinks(
                self.kinks, kinked=True, options=self.solver, stop=self.stop, weight_decay=self.loss.weight_decay
            )
        if self.graph == "edges" and not (self.edges and self.inputs and self.outputs):
            raise ValueError("graph='edges' needs `edges`, `inputs` and `outputs`.")

    def _check_options(self) -> None:
        """What a stored config needs of its option objects: what `to_dict` can write."""
        s, sv, st, ob = self.solver, self.saveat, self.stop, self.loss
        bad = [
            what
            for what, no in (
                ("a solver instance (give its name)", not isinstance(s.solver, str)),
                ("dt0", s.dt0 is not None),
                ("stepsize_controller", s.stepsize_controller is not None),
                ("explicit save times (give n_save)", sv.ts is not None),
                ("log-spaced save times", sv.spacing != "linear"),
                ("max_wall_time (results would depend on the machine)", st.max_wall_time is not None),
                ("a callable loss (give its name)", not isinstance(ob.loss, str)),
                ("a regularizer", ob.regularizer is not None),
            )
            if no
        ]
        if bad:
            raise ValueError(
                f"A SweepConfig is stored as data and cannot hold {', '.join(bad)}; use ij.sweep_flows for those."
            )
        s.check_dtype(np.float64)  # sweeps run in float64 (run_sweep checks x64 is on)
        if ob.loss not in ("mse", "bce"):
            raise ValueError(f"Unknown loss {ob.loss!r}; choose 'mse' or 'bce'.")

    # ------------------------------------------------------------------ the flat names

    kink_aware = property(
        lambda self: isinstance(self.kinks, KinkOptions),
        doc="Whether the sweep is kink-aware (`kinks` holds a `KinkOptions`).",
    )
    solver_options = property(lambda self: self.solver, doc="`solver` (an `ij.SolverOptions`).")
    save_times = property(lambda self: self.saveat, doc="`saveat` (an `ij.SaveTimes`).")
    stop_rules = property(lambda self: self.stop, doc="`stop` (an `ij.StopRules`).")
    kink_options = property(
        lambda self: self.kinks if isinstance(self.kinks, KinkOptions) else KinkOptions(),
        doc="The `KinkOptions` of a kink-aware sweep (the defaults otherwise).",
    )
    solver_name = property(lambda self: self.solver.solver, doc="The solver's name.")
    loss_name = property(lambda self: self.loss.loss, doc="The loss's name.")
    rtol = property(lambda self: self.solver.rtol, doc="`solver.rtol`.")
    atol = property(lambda self: self.solver.atol, doc="`solver.atol`.")
    max_steps = property(lambda self: self.solver.max_steps, doc="`solver.max_steps`.")
    n_save = property(lambda self: self.saveat.n_save, doc="`saveat.n_save`.")
    grad_norm_tol = property(lambda self: self.stop.grad_norm_tol, doc="`stop.grad_norm_tol`.")
    loss_floor = property(lambda self: self.stop.loss_floor, doc="`stop.loss_floor`.")
    max_param_norm = property(lambda self: self.stop.max_param_norm, doc="`stop.max_param_norm`.")
    weight_decay = property(lambda self: self.loss.weight_decay, doc="`loss.weight_decay`.")
    max_events = property(lambda self: self.kink_options.max_events, doc="`kinks.max_events`.")
    max_sliding = property(lambda self: self.kink_options.max_sliding, doc="`kinks.max_sliding`.")
    event_tol = property(lambda self: self.kink_options.event_tol, doc="`kinks.event_tol`.")
    surface_tol = property(lambda self: self.kink_options.surface_tol, doc="`kinks.surface_tol`.")

    # ------------------------------------------------------------------ io

    def to_dict(self) -> dict[str, Any]:
        """The config as JSON-ready values, flat (the form results folders store, and the
        config hash): the option objects' fields under their flat keys; the `KinkOptions`
        fields only where they differ from their defaults, and `hidden` only when set (so
        the config hash of a sweep that does not set them is the one it had before they
        existed)."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in _OBJECT_FIELDS}
        d.update(
            solver=self.solver.solver,
            rtol=self.rtol,
            atol=self.atol,
            max_steps=self.max_steps,
            n_save=self.n_save,
            grad_norm_tol=self.grad_norm_tol,
            loss_floor=self.loss_floor,
            max_param_norm=self.max_param_norm,
            loss=self.loss.loss,
            weight_decay=self.weight_decay,
            kink_aware=self.kink_aware,
        )
        d.update({k: getattr(self, k) for k in _KINK_FIELDS if getattr(self, k) != _KINK_DEFAULTS[k]})
        if not d["hidden"]:
            del d["hidden"]
        return {
            k: (list(map(list, v)) if k == "edges" else list(v) if isinstance(v, tuple) else v) for k, v in d.items()
        }

    def to_toml(self) -> str:
        """The config as a TOML file that `from_toml` reads back: the plain fields at the
        top level, each option object as its table (`[solver]`, `[save]`, `[stop]`,
        `[objective]`, `[kinks]`)."""
        d = self.to_dict()
        tables = {t: {k: d.pop(k) for k in keys if k in d} for t, (_, _, keys) in TABLES.items()}
        lines = [f"{k} = {_toml_value(v)}" for k, v in d.items() if v is not None]
        for t, kv in tables.items():
            lines += ["", f"[{t}]"] + [f"{k} = {_toml_value(v)}" for k, v in kv.items() if v is not None]
        return "\n".join(lines) + "\n"

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SweepConfig:
        """A config from `to_dict()`'s flat form (a stored manifest, the command line's
        flags), or with the option objects themselves. Unknown keys raise `ValueError`."""
        unknown = sorted(set(d) - set(cls.keys()))
        if unknown:
            raise ValueError(f"Unknown sweep config key(s) {unknown}; known keys: {sorted(cls.keys())}.")
        config = cls.__new__(cls)
        d = dict(d)
        config._setup(d, {k: d.pop(k) for k in FLAT_KEYS if k in d and k not in _NAMED})
        return config

    @classmethod
    def from_toml(cls, path: str | Path, **overrides) -> SweepConfig:
        """Read a TOML file (`read_config_toml`: the option tables `[solver]`, `[save]`,
        `[stop]`, `[objective]`, `[kinks]`; keys beside the `[sweep]` table, unknown tables,
        a binary file, a byte-order mark and syntax errors follow its rules).

        **Arguments:**

        - `path`: the TOML file.
        - `overrides`: options that replace the file's (flat keys, as the CLI's flags).

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
            return random_dag(
                self.n_inputs, self.n_hidden, self.n_outputs, self.edge_prob, self.graph_seed, bias=self.bias
            )
        return DAG.from_edges(
            list(self.edges),
            inputs=list(self.inputs),
            outputs=list(self.outputs),
            constants=list(self.constants),
            hidden=list(self.hidden),
        )

    def build_data(self, graph: DAG | None = None):
        """The teacher-student data `(X, Y)` every trajectory of the sweep trains on
        (`ij.teacher_student` with key `jax.random.key(data_seed)`).

        **Arguments:**

        - `graph`: `build_graph()` (default: built here).

        **Returns:** `(X, Y)`, shapes `(n_samples, d_in)` and `(n_samples, d_out)`.
        """
        graph = self.build_graph() if graph is None else graph
        X, Y, _ = teacher_student(
            graph,
            int(self.n_samples),
            key=jr.key(self.data_seed),
            activation=self.teacher_activation or self.activation,
        )
        return X, Y


def _fold(field: str, cls, keys: tuple[str, ...], value, explicit: bool, flat: dict):
    """The option object of `field`: `value` (an object, or a name for `solver` / `loss`)
    with the flat keys in `flat` that belong to it folded in (only without an object)."""
    mine = {k: flat.pop(k) for k in keys if k in flat}
    if field in _NAMED and isinstance(value, str):
        return cls(**{keys[0]: value, **mine})
    if explicit and mine:
        raise ValueError(f"Pass {', '.join(sorted(mine))} inside {field}={cls.__name__}(...), not as keywords as well.")
    return cls(**mine) if mine else value


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return repr(v)


def _flatten_tables(d: dict, path: Path) -> dict:
    """`d` with the option tables (`[solver]`, ...) flattened into their keys; flat
    option keys outside their table are read with a `DeprecationWarning` naming it."""
    out: dict[str, Any] = {}
    old: list[str] = []
    for key, value in d.items():
        if isinstance(value, dict):
            keys = TABLES[key][2]
            unknown = sorted(set(value) - set(keys))
            if unknown:
                raise ValueError(
                    f"Config file {str(path)!r}: unknown key(s) {unknown} in [{key}]; it takes {list(keys)}."
                )
            twice = sorted(set(value) & set(out))
            if twice:
                raise ValueError(f"Config file {str(path)!r}: {twice} given twice, in [{key}] and outside it.")
            out.update(value)
        else:
            if key in out:
                raise ValueError(f"Config file {str(path)!r}: {key!r} given twice, in its table and outside it.")
            out[key] = value
            if key in FLAT_KEYS:
                old.append(key)
    if old:
        where = {k: t for t, (_, _, keys) in TABLES.items() for k in keys}
        new = "; ".join(
            f"[{t}] " + ", ".join(f"{k} = ..." for k in old if where[k] == t)
            for t in dict.fromkeys(where[k] for k in old)
        )
        warnings.warn(
            f"Config file {str(path)!r}: flat option keys {old} are deprecated; write them in their "
            f"tables instead: {new}.",
            DeprecationWarning,
            stacklevel=3,
        )
    return out


def init_theta(config: SweepConfig, graph: DAG, index) -> jax.Array:
    """Initial edge weights of initialization `index`: the key is
    `jax.random.fold_in(jax.random.key(config.seed), index)`, so a trajectory does not
    depend on how the sweep is split. Equals `DAGNetwork(graph, activation,
    key=that_key, init=config.init, scale=config.scale).edge_weights()`."""
    key = jr.fold_in(jr.key(config.seed), index)
    return init_edge_weights(graph, key, config.init, scale=config.scale)
