"""The engine: the only package that imports Lightning (evaluation_module: the Lightning evaluation engine's module and trainer)."""
