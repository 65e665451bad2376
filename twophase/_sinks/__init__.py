"""The sinks' public base classes: what a connector subclasses, one per commit protocol."""
