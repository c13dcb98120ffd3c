"""Directed acyclic graphs that carry neural networks: structure only (NumPy, no JAX).

A `DAG` fixes the canonical orders that every other module relies on:

- `nodes`: inputs (in the user's order), then hidden nodes sorted by topological level
  (ties keep the user's order), then outputs (in the user's order);
- `edges`: sorted by (index of source, index of target), i.e. row-major in `mask`.

Constant input nodes (`constants`) always emit 1; an edge from one is a bias.
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Iterable, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np

from ._scalar_checks import check_integer

__all__ = ["DAG", "mlp", "random_dag", "example_dag", "from_networkx", "to_networkx"]


def _fmt(nodes: Iterable[Hashable]) -> str:
    return "[" + ", ".join(repr(v) for v in nodes) + "]"


class DAG:
    """A directed acyclic graph with designated input, hidden and output nodes.

    Build one with `DAG.from_edges`, `mlp`, `random_dag` or `from_networkx`. Instances
    are immutable and hashable, so a `DAG` can be a static field of an `eqx.Module`.
    """

    # set once by `_build` (annotated here for type checkers; not class attributes)
    inputs: tuple[Hashable, ...]
    hidden: tuple[Hashable, ...]
    outputs: tuple[Hashable, ...]
    constants: tuple[Hashable, ...]
    nodes: tuple[Hashable, ...]
    index: dict[Hashable, int]
    edges: tuple[tuple[Hashable, Hashable], ...]
    _key: tuple

    def __init__(self, *args, **kwargs):
        raise TypeError(
            "Build a DAG with `DAG.from_edges(edges, inputs=..., outputs=...)`, or with "
            "the builders `mlp(...)`, `random_dag(...)` or `from_networkx(...)`."
        )

    # ------------------------------------------------------------------ building

    @classmethod
    def from_edges(
        cls,
        edges: Iterable[tuple[Hashable, Hashable]],
        *,
        inputs: Sequence[Hashable],
        outputs: Sequence[Hashable],
        constants: Sequence[Hashable] = (),
        hidden: Sequence[Hashable] = (),
    ) -> DAG:
        """**Arguments:**

        - `edges`: pairs `(u, v)` meaning an edge (one weight) from `u` to `v`. Labels
            may be any hashable values.
        - `inputs`: the input nodes, in the order the network's input vector uses.
        - `outputs`: the output nodes, in the order of the network's output vector.
        - `constants`: input nodes that always emit 1 (bias nodes). They must also be
            listed in `inputs`, or they are appended to it.
        - `hidden`: optional; hidden nodes are otherwise every other node met in
            `edges`. Listing them fixes the tie-break order within a level.

        **Returns:** a validated `DAG`. Raises `ValueError` naming the culprit for a
        cycle, a self-loop, a duplicate edge, an edge to an unknown node, an input with
        incoming edges, an output with outgoing edges, or a hidden node that cannot be
        reached from an input or cannot reach an output.
        """
        edges = _edge_pairs(edges)
        inputs, outputs, constants = _roles(inputs, outputs, constants, hidden)
        order = _node_order(edges, inputs, outputs, hidden)
        _check_edges(edges, inputs, outputs)
        gx = nx.DiGraph()
        gx.add_nodes_from(order)
        gx.add_edges_from(edges)
        hidden_nodes = _hidden_on_paths(gx, order, inputs, outputs)
        return cls._build(inputs, hidden_nodes, outputs, constants, edges, gx)

    @classmethod
    def _build(cls, inputs, hidden_nodes, outputs, constants, edges, gx) -> DAG:
        level: dict = {v: 0 for v in inputs}
        for v in nx.topological_sort(gx):
            preds = list(gx.predecessors(v))
            if v not in level:
                level[v] = 1 + max((level[u] for u in preds), default=-1)
        pos = {v: i for i, v in enumerate(hidden_nodes)}
        hidden_sorted = sorted(hidden_nodes, key=lambda v: (level[v], pos[v]))
        self = object.__new__(cls)
        self.inputs = tuple(inputs)
        self.hidden = tuple(hidden_sorted)
        self.outputs = tuple(outputs)
        self.constants = tuple(constants)
        self.nodes = self.inputs + self.hidden + self.outputs
        self.index = {v: i for i, v in enumerate(self.nodes)}
        self.edges = tuple(sorted(edges, key=lambda e: (self.index[e[0]], self.index[e[1]])))
        self._key = (self.inputs, self.hidden, self.outputs, self.constants, self.edges)
        self.__dict__["_level"] = level
        return self

    # --------------------------------------------------------------- identity

    def __hash__(self) -> int:
        return hash(self._key)

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, DAG) and self._key == other._key

    def __repr__(self) -> str:
        return (
            f"DAG(inputs={len(self.inputs)}, hidden={len(self.hidden)}, "
            f"outputs={len(self.outputs)}, edges={len(self.edges)}, "
            f"constants={len(self.constants)})"
        )

    def __getstate__(self):
        return {
            "edges": self.edges,
            "inputs": self.inputs,
            "outputs": self.outputs,
            "constants": self.constants,
            "hidden": self.hidden,
        }

    def __setstate__(self, state):
        g = DAG.from_edges(
            state["edges"],
            inputs=state["inputs"],
            outputs=state["outputs"],
            constants=state["constants"],
            hidden=state["hidden"],
        )
        self.__dict__.update(g.__dict__)

    # --------------------------------------------------------------- structure

    @property
    def n_nodes(self) -> int:
        return len(self.nodes)

    @property
    def data_inputs(self) -> tuple:
        """Input nodes that read the data vector (all inputs except constants)."""
        return tuple(v for v in self.inputs if v not in set(self.constants))

    @property
    def n_in(self) -> int:
        """Length of the network's input vector (constants excluded)."""
        return len(self.data_inputs)

    @property
    def n_out(self) -> int:
        return len(self.outputs)

    @cached_property
    def edge_index(self) -> tuple[np.ndarray, np.ndarray]:
        """`(rows, cols)`: node indices of each edge's source and target, in edge order."""
        rows = np.array([self.index[u] for u, _ in self.edges], dtype=np.int64)
        cols = np.array([self.index[v] for _, v in self.edges], dtype=np.int64)
        return rows, cols

    @cached_property
    def mask(self) -> np.ndarray:
        """`(n, n)` boolean, `mask[u, v]` is True iff the edge u -> v exists."""
        m = np.zeros((self.n_nodes, self.n_nodes), dtype=bool)
        rows, cols = self.edge_index
        m[rows, cols] = True
        m.setflags(write=False)
        return m

    @cached_property
    def levels(self) -> tuple[tuple, ...]:
        """Hidden nodes grouped by topological level (longest path from an input),
        level 1 first. Inputs are level 0; outputs are evaluated after every level."""
        lv = self.__dict__["_level"]
        out: dict[int, list] = {}
        for v in self.hidden:
            out.setdefault(lv[v], []).append(v)
        return tuple(tuple(out[k]) for k in sorted(out))

    def level_of(self, v: Hashable) -> int:
        return self.__dict__["_level"][v]

    def predecessors(self, v: Hashable) -> tuple:
        i = self.index[v]
        return tuple(self.nodes[j] for j in np.flatnonzero(self.mask[:, i]))

    def successors(self, v: Hashable) -> tuple:
        i = self.index[v]
        return tuple(self.nodes[j] for j in np.flatnonzero(self.mask[i, :]))

    def in_edges(self, v: Hashable) -> tuple[int, ...]:
        """Edge indices (in `edges` order) entering `v`."""
        _, cols = self.edge_index
        return tuple(int(k) for k in np.flatnonzero(cols == self.index[v]))

    def out_edges(self, v: Hashable) -> tuple[int, ...]:
        """Edge indices (in `edges` order) leaving `v`."""
        rows, _ = self.edge_index
        return tuple(int(k) for k in np.flatnonzero(rows == self.index[v]))

    @cached_property
    def _reach(self) -> np.ndarray:
        """`reach[u, v]` iff there is a directed path (length >= 1) from u to v."""
        n = self.n_nodes
        reach = np.zeros((n, n), dtype=bool)
        for i in reversed(range(n)):  # canonical order is topological
            succ = np.flatnonzero(self.mask[i])
            if succ.size:
                reach[i] = self.mask[i] | reach[succ].any(axis=0)
        reach.setflags(write=False)
        return reach

    def ancestors(self, v: Hashable) -> frozenset:
        """All nodes with a directed path to `v` (excluding `v`)."""
        i = self.index[v]
        return frozenset(self.nodes[j] for j in np.flatnonzero(self._reach[:, i]))

    def descendants(self, v: Hashable) -> frozenset:
        """All nodes reachable from `v` by a directed path (excluding `v`)."""
        i = self.index[v]
        return frozenset(self.nodes[j] for j in np.flatnonzero(self._reach[i]))

    @cached_property
    def in_degree(self) -> np.ndarray:
        return self.mask.sum(axis=0)

    @cached_property
    def out_degree(self) -> np.ndarray:
        return self.mask.sum(axis=1)

    @cached_property
    def in_bottlenecks(self) -> tuple:
        """Hidden nodes with exactly one incoming edge (a bias edge counts)."""
        return tuple(v for v in self.hidden if self.in_degree[self.index[v]] == 1)

    @cached_property
    def out_bottlenecks(self) -> tuple:
        """Hidden nodes with exactly one outgoing edge."""
        return tuple(v for v in self.hidden if self.out_degree[self.index[v]] == 1)

    def incidence(self) -> np.ndarray:
        """`B~`, shape `(len(hidden), len(edges))`: `+1` where the edge enters the hidden
        node, `-1` where it leaves it, `0` otherwise. Rows follow `hidden`, columns
        follow `edges`."""
        return self._incidence.copy()

    @cached_property
    def _incidence(self) -> np.ndarray:
        n_in = len(self.inputs)
        rows, cols = self.edge_index
        B = np.zeros((len(self.hidden), len(self.edges)))
        k = np.arange(len(self.edges))
        hid = lambda idx: (idx >= n_in) & (idx < n_in + len(self.hidden))  # noqa: E731
        m = hid(cols)
        B[cols[m] - n_in, k[m]] += 1.0
        m = hid(rows)
        B[rows[m] - n_in, k[m]] -= 1.0
        B.setflags(write=False)
        return B

    def to_networkx(self) -> nx.DiGraph:
        return to_networkx(self)

    # --------------------------------------------------------------- edge-list files

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> DAG:
        """Read an edge-list file (the format the CLI's `--graph PATH`, a TOML
        `graph = "PATH"` and `SweepConfig(graph=PATH)` read; `DAG.to_file` writes it).

        The file is UTF-8 text: one `u v` line per edge (one weight from `u` to `v`), and
        the lines `inputs: ...`, `outputs: ...`, optionally `constants: ...` (bias nodes
        that always emit 1) and `hidden: ...` (fixes the tie-break order of hidden nodes
        within a level), each a space-separated list of labels. `#` starts a comment.
        Labels are read as strings. For example:

        ```
        # two inputs, a bias b, hidden h1 h2, one output y
        inputs: x1 x2
        constants: b
        outputs: y
        x1 h1
        x2 h1
        b h1
        x2 h2
        h1 y
        h2 y
        ```

        **Arguments:**

        - `path`: the file.

        **Returns:** a validated `DAG` (as `DAG.from_edges`). Raises `FileNotFoundError`
        for a missing file and `ValueError` naming the file and line for anything else.
        """
        path = Path(path)
        text = _read_text(path)
        edges: list[tuple[str, str]] = []
        roles: dict[str, list[str]] = {"inputs": [], "outputs": [], "constants": [], "hidden": []}
        for lineno, raw in enumerate(text.splitlines(), start=1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            head, sep, rest = line.partition(":")
            if sep and head.strip() in roles:
                roles[head.strip()] = rest.split()
                continue
            parts = line.split()
            if len(parts) != 2:
                raise ValueError(f"{path}:{lineno}: expected 'u v' or 'inputs: ...'; got {raw!r}.")
            edges.append((parts[0], parts[1]))
        if not roles["inputs"] or not roles["outputs"]:
            raise ValueError(f"{path}: add lines 'inputs: ...' and 'outputs: ...' naming the input and output nodes.")
        if not edges:
            raise ValueError(
                f"{path}: no edges; add one 'u v' line per edge (e.g. '{roles['inputs'][0]} {roles['outputs'][0]}')."
            )
        used = {u for u, _ in edges} | {v for _, v in edges}
        for role in ("outputs", "hidden"):  # unused inputs are allowed, as in from_edges
            unused = [v for v in roles[role] if v not in used]
            if unused:
                raise ValueError(
                    f"{path}: {role} {unused} appear in no edge; add their edges or drop them from '{role}:'."
                )
        return cls.from_edges(
            edges,
            inputs=roles["inputs"],
            outputs=roles["outputs"],
            constants=roles["constants"],
            hidden=roles["hidden"],
        )

    def to_file(self, path: str | os.PathLike) -> Path:
        """Write this graph as an edge-list file that `DAG.from_file` reads back: the
        `inputs:`, `constants:`, `hidden:` and `outputs:` lines, then one `u v` line per
        edge in canonical order. `DAG.from_file(path) == g` when every label is a string;
        other labels are written with `str` and come back as strings.

        **Arguments:**

        - `path`: the file to write (replaced if it exists).

        **Returns:** the path. Raises `ValueError` for a label that cannot be written
        (empty, or containing whitespace, `#` or `:`).
        """
        for v in self.nodes:
            s = str(v)
            if not s or any(ch.isspace() for ch in s) or "#" in s or ":" in s:
                raise ValueError(
                    f"Node label {v!r} cannot be written to an edge-list file (empty, or it holds "
                    "whitespace, '#' or ':'); relabel the graph (e.g. DAG.from_edges with "
                    "str labels) first."
                )
        lines = [f"# {self!r}"]
        for role, group in (
            ("inputs", [v for v in self.inputs if v not in set(self.constants)]),
            ("constants", self.constants),
            ("hidden", self.hidden),
            ("outputs", self.outputs),
        ):
            if group:
                lines.append(f"{role}: " + " ".join(map(str, group)))
        lines += [f"{u} {v}" for u, v in self.edges]
        path = Path(path)
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path


def _read_text(path: Path) -> str:
    """The UTF-8 text of an edge-list file, or an error that names the file and the fix."""
    if path.is_dir():
        raise ValueError(
            f"Edge-list file {str(path)!r} is a directory; give a text file of 'u v' lines "
            "with 'inputs: ...' and 'outputs: ...'."
        )
    if not path.is_file():
        raise FileNotFoundError(f"Edge-list file {str(path)!r} does not exist.")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(
            f"Edge-list file {str(path)!r} is not a text file (byte {e.start} is not UTF-8); "
            "give a text file of 'u v' lines with 'inputs: ...' and 'outputs: ...'."
        ) from None
    if "\x00" in text:
        raise ValueError(f"Edge-list file {str(path)!r} is not a text file (it contains NUL bytes).")
    return text


# ---------------------------------------------------------------------- builders


# ------------------------------------------------- the checks of DAG.from_edges, in order


def _edge_pairs(edges) -> list[tuple]:
    """The edges as a non-empty list of 2-tuples; `TypeError` / `ValueError` otherwise."""
    if isinstance(edges, (str, bytes)):
        raise TypeError(f"edges must be a list of (u, v) pairs; got the string {edges!r}.")
    raw = list(edges)
    for e in raw:
        if isinstance(e, (str, bytes)) or not isinstance(e, Iterable):
            raise TypeError(
                f"Edge {e!r} is not a pair (u, v); give edges as 2-tuples, e.g. {('x', 'a')!r}, not the string 'xa'."
            )
    edges = [tuple(e) for e in raw]
    for e in edges:
        if len(e) != 2:
            raise ValueError(f"Edge {e!r} is not a pair (u, v); give edges as 2-tuples.")
    if not edges:
        raise ValueError("The graph has no edges, so a network on it has no weights; give at least one (u, v) edge.")
    return edges


def _roles(inputs, outputs, constants, hidden) -> tuple[list, list, list]:
    """`(inputs, outputs, constants)` as lists, the constants appended to the inputs
    where missing; each node listed once, at least one input and one output, no node
    both an input and an output."""
    inputs = list(inputs)
    constants = list(constants)
    for c in constants:
        if c not in inputs:
            inputs.append(c)
    outputs = list(outputs)
    for name, group in (("inputs", inputs), ("outputs", outputs), ("hidden", hidden)):
        if len(set(group)) != len(group):
            dup = [v for v in group if list(group).count(v) > 1]
            raise ValueError(f"Node {dup[0]!r} is listed twice in `{name}`; list each node once.")
    if not inputs:
        raise ValueError("A DAG needs at least one input node; pass `inputs=[...]`.")
    if not outputs:
        raise ValueError("A DAG needs at least one output node; pass `outputs=[...]`.")
    both = set(inputs) & set(outputs)
    if both:
        raise ValueError(f"Node {next(iter(both))!r} is both an input and an output; a node has one role.")
    return inputs, outputs, constants


def _node_order(edges, inputs, outputs, hidden) -> list:
    """Every node: inputs, the listed hidden nodes, the others in the order the edges meet
    them (only when `hidden` is not given: else an unknown node is an error), outputs."""
    known = set(inputs) | set(outputs) | set(hidden)
    order = list(inputs) + list(hidden)
    for u, v in edges:
        for w in (u, v):
            if w not in known:
                if hidden:
                    raise ValueError(
                        f"Edge ({u!r}, {v!r}) names the unknown node {w!r}; add it to "
                        "`hidden`, `inputs` or `outputs`, or fix the edge."
                    )
                known.add(w)
                order.append(w)
    order += [v for v in outputs if v not in order]
    return order


def _check_edges(edges, inputs, outputs) -> None:
    """No self-loop, no duplicate edge, every output fed, no edge into an input or out of
    an output."""
    seen: set = set()
    for u, v in edges:
        if u == v:
            raise ValueError(f"Self-loop on node {u!r}; a DAG has no edge from a node to itself.")
        if (u, v) in seen:
            raise ValueError(f"Duplicate edge ({u!r}, {v!r}); each edge carries one weight, list it once.")
        seen.add((u, v))
    in_set, out_set = set(inputs), set(outputs)
    used = {w for e in edges for w in e}
    # an input that feeds nothing is a feature the network ignores (random_dag and
    # magnitude pruning make them); an output that nothing feeds is a mistake
    unused = [v for v in outputs if v not in used]
    if unused:
        raise ValueError(
            f"Output node(s) {unused} appear in no edge, so nothing feeds them; add their edges or drop them."
        )
    for u, v in edges:
        if v in in_set:
            raise ValueError(
                f"Input node {v!r} has an incoming edge from {u!r}; inputs have no "
                "incoming edges. Make it a hidden node or drop the edge."
            )
        if u in out_set:
            raise ValueError(
                f"Output node {u!r} has an outgoing edge to {v!r}; outputs have no "
                "outgoing edges. Add a hidden node in between or drop the edge."
            )


def _hidden_on_paths(gx: nx.DiGraph, order, inputs, outputs) -> list:
    """The hidden nodes (in `order`), after checking that the graph has no cycle and that
    each lies on an input-to-output path."""
    try:
        cycle = nx.find_cycle(gx)
    except nx.NetworkXNoCycle:
        cycle = None
    if cycle is not None:
        path = " -> ".join(repr(u) for u, _ in cycle) + f" -> {cycle[0][0]!r}"
        raise ValueError(f"The graph has a cycle: {path}. Remove one of its edges.")
    in_set, out_set = set(inputs), set(outputs)
    hidden_nodes = [v for v in order if v not in in_set and v not in out_set]
    reach_from_in = set().union(*(nx.descendants(gx, s) for s in inputs))
    reach_to_out = set().union(*(nx.ancestors(gx, s) for s in outputs))
    for v in hidden_nodes:
        if v not in reach_from_in:
            raise ValueError(
                f"Hidden node {v!r} cannot be reached from any input; connect it to an input path or remove it."
            )
        if v not in reach_to_out:
            raise ValueError(f"Hidden node {v!r} cannot reach any output; connect it to an output path or remove it.")
    return hidden_nodes


def mlp(widths: Sequence[int], *, bias: bool = False) -> DAG:
    """A layered, fully connected network.

    **Arguments:**

    - `widths`: `[d_in, h_1, ..., h_k, d_out]`, all positive integers.
    - `bias`: add a constant node `"b"` with an edge to every hidden and output node.

    **Returns:** a `DAG` with nodes `"x{i}"` (inputs), `"h{l}_{j}"` (hidden layer `l`,
    starting at 1) and `"y{k}"` (outputs).
    """
    widths = list(widths)
    if len(widths) < 2:
        raise ValueError(f"mlp needs at least [d_in, d_out]; got widths={widths}.")
    for i, w in enumerate(widths):
        check_integer(f"widths[{i}]", w, minimum=1)
    layers = [[f"x{i}" for i in range(widths[0])]]
    for l, w in enumerate(widths[1:-1], start=1):
        layers.append([f"h{l}_{j}" for j in range(w)])
    layers.append([f"y{k}" for k in range(widths[-1])])
    edges = [(u, v) for a, b in zip(layers[:-1], layers[1:]) for u in a for v in b]
    constants = []
    if bias:
        constants = ["b"]
        edges += [("b", v) for layer in layers[1:] for v in layer]
    hidden = [v for layer in layers[1:-1] for v in layer]
    return DAG.from_edges(edges, inputs=layers[0], outputs=layers[-1], constants=constants, hidden=hidden)


def _rng(key) -> np.random.Generator:
    """A NumPy generator from an int seed, a generator, or an array of integers (a PRNG key's
    raw data). A typed PRNG key is turned into its raw data by `network.random_dag` (the
    public `ij.random_dag`), so this module never touches the array library that made it."""
    if isinstance(key, np.random.Generator):
        return key
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        return np.random.default_rng(int(key))
    try:
        data = np.asarray(key)
        if data.dtype.kind not in "ui":
            raise TypeError
    except TypeError:
        raise TypeError(
            "key must be a PRNG key, an int seed, a numpy Generator or an array of unsigned integers; "
            f"got {type(key).__name__}. Pass a typed PRNG key to ij.random_dag, which takes its raw data."
        ) from None
    return np.random.default_rng(np.asarray(data, dtype=np.uint64).ravel().tolist())


def random_dag(
    n_inputs: int,
    n_hidden: int,
    n_outputs: int,
    edge_prob: float,
    key: Any = 0,
    *,
    bias: bool = False,
    allow_input_output: bool = True,
) -> DAG:
    """A random DAG on `n_hidden` hidden nodes in a random topological order.

    Each forward pair (earlier node, later node) becomes an edge with probability
    `edge_prob`. Afterwards every hidden node without an incoming edge gets one from a
    uniformly chosen earlier node, and every hidden node without an outgoing edge gets
    one to a uniformly chosen later node, so every hidden node lies on an
    input-to-output path; every output gets at least one incoming edge.

    **Arguments:**

    - `n_inputs`, `n_hidden`, `n_outputs`: node counts (`n_hidden` may be 0).
    - `edge_prob`: probability in `[0, 1]` of each forward edge.
    - `key`: an int seed, a `numpy.random.Generator` or a PRNG key's raw data (an array of
      unsigned integers). `ij.random_dag` (`network.random_dag`) also takes a typed JAX key.
    - `bias`: add a constant node `"b"` with an edge to every hidden and output node.
    - `allow_input_output`: allow direct input -> output edges.

    **Returns:** a `DAG` with nodes `"x{i}"`, `"h{j}"`, `"y{k}"` (and `"b"`).
    """
    for name, val, lo in (("n_inputs", n_inputs, 1), ("n_hidden", n_hidden, 0), ("n_outputs", n_outputs, 1)):
        check_integer(name, val, minimum=lo)
    if not (0.0 <= float(edge_prob) <= 1.0):
        raise ValueError(f"edge_prob must lie in [0, 1]; got {edge_prob!r}.")
    rng = _rng(key)
    xs = [f"x{i}" for i in range(n_inputs)]
    hs = [f"h{j}" for j in range(n_hidden)]
    ys = [f"y{k}" for k in range(n_outputs)]
    edges: set = set()
    for j, h in enumerate(hs):  # sources of h: inputs and earlier hidden
        for u in xs + hs[:j]:
            if rng.random() < edge_prob:
                edges.add((u, h))
    for y in ys:
        for u in (xs if allow_input_output else []) + hs:
            if rng.random() < edge_prob:
                edges.add((u, y))
    for j, h in enumerate(hs):
        if not any(e[1] == h for e in edges):
            src = xs + hs[:j]
            edges.add((src[rng.integers(len(src))], h))
    for j, h in enumerate(hs):
        if not any(e[0] == h for e in edges):
            dst = hs[j + 1 :] + ys
            edges.add((h, dst[rng.integers(len(dst))]))
    for y in ys:
        if not any(e[1] == y for e in edges):
            src = hs if (hs and not allow_input_output) else xs + hs
            edges.add((src[rng.integers(len(src))], y))
    constants = []
    if bias:
        constants = ["b"]
        edges |= {("b", v) for v in hs + ys}
    return DAG.from_edges(list(edges), inputs=xs, outputs=ys, constants=constants, hidden=hs)


def from_networkx(
    graph: nx.DiGraph,
    *,
    inputs: Sequence[Hashable] | None = None,
    outputs: Sequence[Hashable] | None = None,
    constants: Sequence[Hashable] | None = None,
) -> DAG:
    """Convert a `networkx.DiGraph`. Roles come from the arguments, else from the node
    attribute `role` (`"input"`, `"hidden"`, `"output"`; `constant=True` marks a bias
    node), else from degrees (sources are inputs, sinks are outputs)."""
    if not isinstance(graph, nx.DiGraph):
        raise TypeError(f"from_networkx needs a networkx.DiGraph; got {type(graph).__name__}.")
    role = nx.get_node_attributes(graph, "role")
    if inputs is None:
        inputs = [v for v in graph if role.get(v) == "input"] if role else [v for v in graph if graph.in_degree(v) == 0]
    if outputs is None:
        outputs = (
            [v for v in graph if role.get(v) == "output"] if role else [v for v in graph if graph.out_degree(v) == 0]
        )
    if constants is None:
        constants = [v for v, c in nx.get_node_attributes(graph, "constant").items() if c]
    hidden = [v for v in graph if v not in set(inputs) | set(outputs)]
    return DAG.from_edges(list(graph.edges), inputs=inputs, outputs=outputs, constants=constants, hidden=hidden)


def to_networkx(g: DAG) -> nx.DiGraph:
    """A `networkx.DiGraph` with node attributes `role`, `constant` and `level`, and edge
    attribute `index` (position in `g.edges`)."""
    gx = nx.DiGraph()
    const = set(g.constants)
    for v in g.inputs:
        gx.add_node(v, role="input", constant=v in const, level=0)
    for v in g.hidden:
        gx.add_node(v, role="hidden", constant=False, level=g.level_of(v))
    for v in g.outputs:
        gx.add_node(v, role="output", constant=False, level=g.level_of(v))
    for k, (u, v) in enumerate(g.edges):
        gx.add_edge(u, v, index=k)
    return gx


def example_dag() -> DAG:
    """The built-in demo graph: 3 inputs, a hidden layer of 4, an out-bottleneck `"k"`
    (one outgoing edge) fed by that layer and by `x1`, and skip connections
    `a2, a3, x0 -> y0`."""
    xs, hs = ["x0", "x1", "x2"], ["a0", "a1", "a2", "a3"]
    edges = [(x, h) for x in xs for h in hs]
    edges += [(h, "k") for h in hs] + [("x1", "k"), ("k", "y0")]
    edges += [("a2", "y0"), ("a3", "y0"), ("x0", "y0")]
    return DAG.from_edges(edges, inputs=xs, outputs=["y0"], hidden=hs + ["k"])
