"""The package version (one place: `__init__` and results manifests read it)."""

__version__ = "0.1.0"
