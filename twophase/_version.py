"""The package's one version (``twophase.__version__``), importable without the rest."""

__version__ = "0.3.0"
