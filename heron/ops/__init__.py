"""Pure math on unbatched sequences (vmap at the call site); no state, no agents."""

from heron.ops.advantages import gae
from heron.ops.distributional import (
    average_log_probs,
    categorical_l2_project,
    categorical_mean,
    categorical_td_loss,
    categorical_td_target,
)
from heron.ops.retrace import (
    RetraceOutput,
    mask_restarts,
    restart_mask,
    retrace_from_importance_weights,
)

__all__ = [
    "RetraceOutput",
    "average_log_probs",
    "categorical_l2_project",
    "categorical_mean",
    "categorical_td_loss",
    "categorical_td_target",
    "gae",
    "mask_restarts",
    "restart_mask",
    "retrace_from_importance_weights",
]
