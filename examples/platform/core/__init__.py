"""The platform's own core package (pure Python): a top-level `core`, next to the project's `ray_efa.core`."""
