"""Tabular classification data: Breast Cancer (scikit-learn's bundled copy) and CSV files.

Both return a `TabularData`: standardised features (train-set mean and std), labels as
`(N, 1)` floats in {0, 1}, and a fixed stratified train/test split.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import equinox as eqx
import numpy as np

__all__ = ["TabularData", "breast_cancer", "load_csv", "split_standardize"]


class TabularData(eqx.Module):
    """A classification data set, split and standardised.

    **Fields:** `X_train` `(N_train, d)`, `Y_train` `(N_train, 1)`, `X_test`, `Y_test`
    (NumPy float64), `feature_names` (tuple of str), `name`, `mean`, `std` (the train-set
    statistics used to standardise both parts).
    """

    X_train: np.ndarray
    Y_train: np.ndarray
    X_test: np.ndarray
    Y_test: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    feature_names: tuple[str, ...] = eqx.field(static=True)
    name: str = eqx.field(static=True)

    @property
    def n_features(self) -> int:
        return self.X_train.shape[1]

    def __repr__(self) -> str:
        return (
            f"TabularData({self.name!r}: {self.X_train.shape[0]} train, {self.X_test.shape[0]} "
            f"test, {self.n_features} features)"
        )


def split_standardize(
    X: np.ndarray,
    y: np.ndarray,
    *,
    test_fraction: float = 0.25,
    seed: int = 0,
    feature_names=None,
    name: str = "data",
) -> TabularData:
    """Stratified train/test split (scikit-learn, fixed `seed`), then standardise with the
    train-set mean and standard deviation (constant columns are left unscaled).

    **Arguments:**

    - `X`: `(N, d)` features; `y`: `(N,)` binary labels (any two distinct values; the
        larger becomes 1).
    - `test_fraction`: in `(0, 1)`.
    - `seed`: the split's random state.

    **Returns:** a `TabularData`.
    """
    from sklearn.model_selection import train_test_split

    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y).reshape(-1)
    if X.ndim != 2 or X.shape[0] != y.shape[0]:
        raise ValueError(f"X must be (N, d) with N = len(y) = {y.shape[0]}; got {X.shape}.")
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1); got {test_fraction!r}.")
    classes = np.unique(y)
    if classes.size != 2:
        raise ValueError(
            f"Labels must take exactly two values (binary classification); got {classes.size}: {classes[:5]}."
        )
    y01 = (y == classes[1]).astype(np.float64)
    idx = np.arange(X.shape[0])
    tr, te = train_test_split(idx, test_size=test_fraction, random_state=seed, stratify=y01)
    tr, te = np.sort(tr), np.sort(te)
    mean = X[tr].mean(axis=0)
    std = X[tr].std(axis=0)
    std = np.where(std > 0, std, 1.0)
    Z = (X - mean) / std
    names = (
        tuple(str(n) for n in feature_names) if feature_names is not None else tuple(f"x{i}" for i in range(X.shape[1]))
    )
    return TabularData(Z[tr], y01[tr, None], Z[te], y01[te, None], mean, std, names, name)


def breast_cancer(*, test_fraction: float = 0.25, seed: int = 0) -> TabularData:
    """The Wisconsin diagnostic Breast Cancer data (569 samples, 30 features), from
    scikit-learn's bundled copy (no download). Label 1 = benign, as in scikit-learn.
    Standardised features and a stratified split (default 25% test, seed 0).

    **Returns:** a `TabularData`.
    """
    from sklearn.datasets import load_breast_cancer

    d = load_breast_cancer()
    return split_standardize(
        d.data, d.target, test_fraction=test_fraction, seed=seed, feature_names=d.feature_names, name="breast_cancer"
    )


def _line_of(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


def _read_rows(path: Path) -> list[tuple[int, list[str]]]:
    """The non-blank rows of a CSV file as `(line number, cells)`; errors name the file
    and the line."""
    if path.is_dir():
        raise ValueError(f"CSV file {str(path)!r} is a directory; give the path of a CSV file.")
    if not path.is_file():
        raise FileNotFoundError(f"CSV file {str(path)!r} does not exist.")
    data = path.read_bytes()
    nul = data.find(b"\x00")
    if nul >= 0:
        raise ValueError(
            f"{path}: line {_line_of(data, nul)} holds a NUL byte: this is not a text file; give a numeric CSV file."
        )
    try:
        text = data.decode("utf-8-sig")  # a byte-order mark is not part of the first cell
    except UnicodeDecodeError as e:
        raise ValueError(
            f"{path}: line {_line_of(data, e.start)}: byte {e.start} is not UTF-8: this is not a "
            "UTF-8 text file; give a numeric CSV file (save it as UTF-8)."
        ) from None
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    rows = []
    while True:
        start = reader.line_num + 1  # a quoted cell may span lines: a row is named by its first
        try:
            rows.append((start, next(reader)))
        except StopIteration:
            break
        except csv.Error as e:
            raise ValueError(f"{path}: line {start}: CSV syntax error ({e}); check the quotes on that line.") from None
    return [(n, r) for n, r in rows if any(c.strip() for c in r)]


def load_csv(
    path: str | Path,
    *,
    target: str | int = -1,
    test_fraction: float = 0.25,
    seed: int = 0,
    header: bool | None = None,
) -> TabularData:
    """Read a numeric CSV file for binary classification.

    **Arguments:**

    - `path`: the file. Every cell must be a finite number.
    - `target`: the label column, by header name or position (default: the last).
    - `test_fraction`, `seed`: as in `split_standardize`.
    - `header`: whether the first row holds column names; by default, guessed (it is a
        header when it has a non-numeric cell).

    **Returns:** a `TabularData`. A non-numeric or missing cell, or a NaN/inf, raises a
    `ValueError` naming its column and its row (1-based line number in the file). A UTF-8
    byte-order mark is skipped; a directory, a binary file (not UTF-8, or NUL bytes) or a
    CSV syntax error (a stray or unterminated quote) raises a `ValueError` naming the file
    and the line.
    """
    path = Path(path)
    lines = _read_rows(path)
    if not lines:
        raise ValueError(f"{path}: the CSV file is empty.")

    def _num(c):
        try:
            float(c)
            return True
        except ValueError:
            return False

    first = lines[0][1]
    if header is None:
        header = not all(_num(c) for c in first)
    names = [c.strip() for c in first] if header else [f"column {j}" for j in range(len(first))]
    body = lines[1:] if header else lines
    if not body:
        raise ValueError(f"{path}: no data rows after the header.")
    width = len(names)
    data = np.empty((len(body), width))
    for k, (lineno, r) in enumerate(body):
        if len(r) != width:
            raise ValueError(f"{path}: row {lineno} has {len(r)} cells; the header has {width}.")
        for j, c in enumerate(r):
            try:
                v = float(c)
            except ValueError:
                raise ValueError(
                    f"{path}: column {names[j]!r}, row {lineno}: {c!r} is not a number. Encode "
                    "categorical columns as numbers or drop the column."
                ) from None
            if not np.isfinite(v):
                raise ValueError(
                    f"{path}: column {names[j]!r}, row {lineno} is {c.strip()!r} (not finite). Impute or drop that row."
                )
            data[k, j] = v
    if isinstance(target, str):
        if target not in names:
            raise ValueError(f"{path}: no column named {target!r}; columns are {names}.")
        t = names.index(target)
    else:
        if not -width <= target < width:
            raise ValueError(f"{path}: target column {target} out of range for {width} columns.")
        t = target % width
    feats = [j for j in range(width) if j != t]
    if not feats:
        raise ValueError(f"{path}: only the target column; add feature columns.")
    return split_standardize(
        data[:, feats],
        data[:, t],
        test_fraction=test_fraction,
        seed=seed,
        feature_names=[names[j] for j in feats],
        name=path.stem,
    )
