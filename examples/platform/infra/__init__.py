"""The platform's own infra package: a top-level `infra`, next to the project's `ray_efa.infra`."""
