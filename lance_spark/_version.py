"""The package version (its own module, so the commit code needs no package import)."""

__version__ = "0.1.0"
