"""heron's environment families, one module each, defining its ``FAMILY``: adding a module
here adds a family (``heron.envs.registry`` registers every one)."""
