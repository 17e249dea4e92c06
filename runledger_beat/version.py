"""The one place the version is written: the package, `runledger-beat --version`, the beats table and the
metrics read it here, and the build reads it from here too (pyproject: dynamic version)."""

__version__ = "0.1.0"
