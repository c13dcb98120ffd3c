"""Where a benchmark writes its results, and the record of the command that made them.

By default a script writes under `benchmarks/results/local/` (ignored by git), so running
it never overwrites the committed results in `benchmarks/results/`; pass `--out` with a
path there to replace them on purpose. Every JSON written through `write_json` starts
with `"command"`: the exact command line (with `PYTHONPATH`) that produced it.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
LOCAL = HERE / "results" / "local"


def output_path(out: str | os.PathLike | None, name: str) -> Path:
    """`out` if given, else `benchmarks/results/local/<name>`; the parent folder is created."""
    path = Path(out) if out else LOCAL / name
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def command() -> str:
    """The command line that is running, as it would be typed from the repository root."""
    script = Path(sys.argv[0]).resolve()
    try:
        script = script.relative_to(HERE.parent)
    except ValueError:
        pass
    env = f"PYTHONPATH={os.environ['PYTHONPATH']} " if os.environ.get("PYTHONPATH") else ""
    return env + " ".join(["python", str(script), *sys.argv[1:]])


def write_json(path: str | os.PathLike, data: dict, **dumps) -> Path:
    """Write `{"command": command(), **data}` as JSON to `path` and say where."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    dumps.setdefault("indent", 1)
    path.write_text(json.dumps({"command": command(), **data}, **dumps))
    print(f"wrote {path}")
    return path
