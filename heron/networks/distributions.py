"""Action distributions, one module for every agent: categorical, multi-categorical (equal
MultiDiscrete, per-control log-probabilities), Gaussian and tanh-Gaussian.

Each is built from a policy head's output and offers ``sample(key, temperature)`` (0 is
greedy: the mode), ``sample_and_log_prob(key)`` (reparameterised where continuous),
``log_prob``, ``mode`` and, where it has a closed form, ``entropy``. Temperature scales the
logits (1 / T) or the standard deviation (x T); temperatures below ``GREEDY_BELOW`` act
greedily, so a tiny temperature never divides logits into infinities.
"""

from __future__ import annotations

import distrax
import jax
import jax.numpy as jnp

from heron.specs import ILLEGAL_LOGIT, ActionSpec

GREEDY_BELOW = 1e-6  # temperatures under this act greedily (the mode)
_EDGE = 1e-6  # keeps squashed actions off +-1, where tanh is not invertible


def _tempered(temperature):
    """(safe temperature, greedy flag): the flag where the temperature is (almost) 0."""
    temperature = jnp.asarray(temperature, jnp.float32)
    greedy = temperature < GREEDY_BELOW
    return jnp.where(greedy, 1.0, temperature), greedy


class Categorical:
    """One categorical control: logits [..., n] -> actions int32 [...]."""

    def __init__(self, logits):
        self.logits = logits

    def _dist(self, temperature=1.0):
        return distrax.Categorical(logits=self.logits / temperature)

    def mode(self):
        return jnp.argmax(self.logits, axis=-1).astype(jnp.int32)

    def sample(self, key, temperature=1.0):
        safe, greedy = _tempered(temperature)
        sampled = self._dist(safe).sample(seed=key).astype(jnp.int32)
        return jnp.where(greedy, self.mode(), sampled)

    def log_prob(self, action):
        return self._dist().log_prob(action)

    def sample_and_log_prob(self, key):
        action = self.sample(key)
        return action, self.log_prob(action)

    def entropy(self):
        return self._dist().entropy()


class MultiCategorical(Categorical):
    """k equal categorical controls: logits [..., k, n] -> actions int32 [..., k]; joint
    log-probabilities sum the controls', ``log_prob_per_control`` keeps them apart."""

    def log_prob_per_control(self, action):
        return distrax.Categorical(logits=self.logits).log_prob(action)

    def log_prob(self, action):
        return jnp.sum(self.log_prob_per_control(action), axis=-1)

    def entropy(self):
        return jnp.sum(distrax.Categorical(logits=self.logits).entropy(), axis=-1)


class Gaussian:
    """A diagonal Gaussian over Box actions: mean, log_std [..., d] -> actions [..., d]."""

    def __init__(self, mean, log_std):
        self.mean, self.log_std = mean, log_std

    def _dist(self, temperature=1.0):
        return distrax.MultivariateNormalDiag(self.mean, jnp.exp(self.log_std) * temperature)

    def mode(self):
        return self.mean

    def sample(self, key, temperature=1.0):
        safe, greedy = _tempered(temperature)
        return jnp.where(greedy, self.mode(), self._dist(safe).sample(seed=key))

    def sample_and_log_prob(self, key, sample_shape=()):
        return self._dist().sample_and_log_prob(seed=key, sample_shape=sample_shape)

    def log_prob(self, action):
        return self._dist().log_prob(action)

    def entropy(self):
        return self._dist().entropy()

    def kl(self, other: Gaussian):
        """KL(self || other), analytic."""
        return self._dist().kl_divergence(other._dist())


class TanhGaussian(Gaussian):
    """A Gaussian squashed by tanh into (-1, 1)^d (agents map it onto the Box); the mode is
    tanh(mean). No closed-form entropy; ``kl`` is the pre-tanh Gaussians' KL, which equals
    the squashed one's (tanh is a bijection)."""

    def _dist(self, temperature=1.0):
        return distrax.Transformed(super()._dist(temperature), distrax.Block(distrax.Tanh(), 1))

    def _normal(self):
        return super()._dist()

    def mode(self):
        return jnp.tanh(self.mean)

    def log_prob(self, action):
        return self._dist().log_prob(jnp.clip(action, -1.0 + _EDGE, 1.0 - _EDGE))

    def entropy(self):
        raise NotImplementedError("a tanh-Gaussian has no closed-form entropy: use samples")

    def kl(self, other: Gaussian):
        return self._normal().kl_divergence(other._normal())


def masked_logits(logits, action_mask):
    """``logits`` [..., n] with the actions ``action_mask`` [..., n] (bool) rules out at
    ``ILLEGAL_LOGIT``: they get probability 0 and are never the argmax (while any action is
    legal). ``()`` for the mask leaves the logits as they are."""
    if isinstance(action_mask, tuple):
        return logits
    return jnp.where(action_mask, logits, ILLEGAL_LOGIT)


def make(spec: ActionSpec, params, squash: bool = False, action_mask=()):
    """The distribution of ``spec``'s actions from a policy head's output: logits for
    discrete actions (of the legal actions only, given ``action_mask``), ``{"mean",
    "log_std"}`` for Box actions (tanh-squashed when ``squash``)."""
    if spec.is_discrete:
        logits = masked_logits(params, action_mask)
        return MultiCategorical(logits) if spec.multi_control else Categorical(logits)
    family = TanhGaussian if squash else Gaussian
    return family(params["mean"], params["log_std"])


def tree_where(condition, x, y):
    """Elementwise choice between two pytrees of the same structure."""
    return jax.tree.map(lambda a, b: jnp.where(condition, a, b), x, y)
