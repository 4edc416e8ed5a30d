"""Pure math on unbatched sequences (vmap at the call site); no state, no agents."""

from heron.ops.advantages import gae

__all__ = ["gae"]
