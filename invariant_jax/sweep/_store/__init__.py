"""The results store of a sweep: Parquet chunks that verify themselves, a JSON manifest,
claims shared by many writers, and a quarantine for damaged files.

- `_files`: atomic and exclusive writes, strict JSON, output-path checks.
- `_ownership`: which files of a folder the store can prove it wrote.
- `_chunks`: one chunk file (Parquet with metadata and checksum; old `.npz` read).
- `_claims`: blocks of indices claimed by writers, with heartbeats.
- `_folder`: `ResultsStore`, the folder as a whole.
"""

from ._chunks import SCHEMA_VERSION, DamagedChunk, read_chunk
from ._claims import BUSY, CLAIMED, DONE, Claims, new_writer
from ._files import (
    FILE_MODE,
    atomic_write_bytes,
    atomic_write_json,
    check_output_file,
    check_output_folder,
    create_exclusive,
    dumps_strict,
    is_no_space,
    strict_json,
)
from ._folder import CHUNKS, CLAIMS, MANIFEST, QUARANTINE, ResultsStore, config_hash
from ._ownership import Inventory, inventory

__all__ = [
    "BUSY",
    "CHUNKS",
    "CLAIMED",
    "CLAIMS",
    "DONE",
    "FILE_MODE",
    "MANIFEST",
    "QUARANTINE",
    "SCHEMA_VERSION",
    "Claims",
    "DamagedChunk",
    "ResultsStore",
    "atomic_write_bytes",
    "atomic_write_json",
    "check_output_file",
    "check_output_folder",
    "config_hash",
    "create_exclusive",
    "dumps_strict",
    "Inventory",
    "inventory",
    "is_no_space",
    "new_writer",
    "read_chunk",
    "strict_json",
]
