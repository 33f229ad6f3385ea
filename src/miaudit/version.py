"""The package version (its own module, so that inner modules read it without importing the
package root, which imports the stages on demand)."""

__version__ = "0.1.0"
