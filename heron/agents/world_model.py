"""A world model (Trax's world-model pretraining, whose output directory initialises a
policy: ``init_policy_from_world_model_output_dir``): the token policy's transformer body
trained as a next-token model on the serialized trajectories of a dataset.

    heron train world-model --dataset DATASET --env gymnax:CartPole-v1 --world-model.vocab-size 32
    heron train ppo --ppo.vocab-size 32 --init-from RUN_DIR       # the body copied

It is a model without a policy (``act`` and ``policy`` are None): it trains from the
``dataset`` source through the same driver as every agent (iterations of
``--updates-per-iteration`` updates, counted towards ``--steps``; checkpoints, resume,
``--init-from``), and is evaluated on the dataset's episodes held out of its replay
(``holdout``, a seeded share) instead of in the environment.

A training example is the window of the last ``tokens.history`` steps ending at a step,
``[o, a, ..., o, a]``, exactly as the token policy reads it: the uniform replay samples
sequences of ``history + 1`` steps, whose last step carries the reward of the window's last
action (a step's reward is the one that arrived at it). Steps of an earlier episode in the
window are padding (right-aligned windows), and the action tokens of an episode's LAST
step (never executed) are never predicted. The model (``TokenBody`` under ``body``, as in
``heron.networks.tokens.TokenPolicyValue``) predicts every next token, observation digits
and actions, and, from the window's last action, its reward. Observations are serialized
as a token policy sees them: through the run's observation pipeline (under
``--normalize-observations``, standardised by the training episodes' statistics).

The evaluation scores the window ending at every step of the held-out episodes: next-token
accuracy (the evaluation line's ``return_mean``) beside that of always predicting the
held-out targets' most frequent token; the error of the last observation decoded from the
predicted digits (teacher-forced) beside that of repeating the observation before it; and
the reward error.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from heron import parallel, serialization
from heron import replay as replayers
from heron.agents import learning
from heron.agents.base import Agent, Scoring, check_config, register
from heron.configs import integer, number, registered, scheduled
from heron.networks import tokens
from heron.networks.network import flat_observation
from heron.networks.tokens import TokenConfig
from heron.specs import EnvSpec
from heron.types import Experience, StepType

ALGO = "world-model"
SERVED = ("uniform",)


@dataclasses.dataclass(frozen=True)
class WorldModelConfig:
    """The model, its training and the share of the dataset held out to score it."""

    vocab_size: int = integer(32, 2)
    """Tokens in the vocabulary; a token PPO policy initialised from this run needs the same
    (--ppo.vocab-size)."""
    tokens: TokenConfig = dataclasses.field(default_factory=TokenConfig)
    """The transformer body and the observation serialization; a policy initialised from
    this run needs the same (--ppo.tokens.*)."""
    batch_size: int = integer(64, 1)
    """Windows per update."""
    learning_rate: float | str = scheduled(1e-3, 0.0, low_open=True)
    """Adam step size (a number or a schedule over updates)."""
    max_grad_norm: float = number(1.0, 0.0, low_open=True, inf_is_off=True)
    """Global-norm gradient clipping; inf disables it."""
    optimizer: str = registered("adam", learning.optimizer_names)
    """Update direction: adam, or an optimiser registered with
    heron.agents.learning.register_optimizer."""
    reward_cost: float = number(1.0, 0.0)
    """Weight of the reward loss (squared error) beside the next-token cross-entropy."""
    holdout: float = number(0.1, 0.0, 1.0, low_open=True, high_open=True)
    """Share of the dataset's episodes held out of training to evaluate the model on (a
    split seeded by the run's seed; at least one episode each way)."""
    summarize_grads_and_vars: bool = False
    """Log the norm of every variable and of its gradient at each update (ALF's
    summarize_grads_and_vars), as grads/<path> and vars/<path>."""

    def __post_init__(self):
        check_config(self, ALGO)
        tokens.check_token_config(self.tokens, f"{ALGO}.tokens")

    @property
    def sequence_length(self) -> int:
        """Steps of a sampled sequence: the window and the step after it (its reward)."""
        return self.tokens.history + 1


class WorldModel(nn.Module):
    """tokens [N, L], step_valid [N, K] -> (next-token logits [N, L, V] (position j predicts
    token j + 1), reward [N] of the window's last step)."""

    vocab_size: int
    layout: serialization.TokenLayout
    config: TokenConfig

    @nn.compact
    def __call__(self, tokens_, step_valid):
        layout = self.layout
        valid = jnp.repeat(step_valid, layout.step_tokens, axis=-1)
        features = tokens.TokenBody(self.vocab_size, layout.n_tokens, self.config, name="body")(
            tokens_, valid
        )
        logits = nn.Dense(self.vocab_size, name="next_token")(features)
        last_action = layout.action_positions[-1, -1]  # has seen the last step's whole action
        reward = nn.Dense(1, name="reward_head")(features[:, last_action])[..., 0]
        return logits, reward


class WorldModelState(NamedTuple):
    params: Any
    opt_state: Any
    update_step: jax.Array  # int32: optimiser steps taken
    controls: Any = ()  # {hyperparameter: multiplier} a controller may change


class Codec(NamedTuple):
    """How steps become tokens: as the token policy writes them (``tokens.serializations``)."""

    observation: serialization.SpaceSerialization
    action: serialization.SpaceSerialization
    layout: serialization.TokenLayout
    observation_shape: tuple
    categorical: bool  # Discrete observations: each category its own token

    def observation_tokens(self, observation):
        """Observations [*B, *obs] -> tokens [*B, O]."""
        observation = flat_observation(self.observation_shape, observation)
        if self.categorical:
            observation = jnp.rint(observation).astype(jnp.int32)
        return serialization.serialize(self.observation, observation)


def codec(spec: EnvSpec, config: WorldModelConfig) -> Codec:
    """The serializations of ``spec``'s observations and actions in ``config``'s layout."""
    categories = spec.observation_categories
    observation, action, layout = tokens.serializations(
        (math.prod(spec.observation_shape),),
        spec.action,
        config.vocab_size,
        config.tokens,
        categories,
    )
    return Codec(observation, action, layout, tuple(spec.observation_shape), categories is not None)


class Windows(NamedTuple):
    """Training examples, the windows ending at the step before a sequence's last: [M, ...]."""

    tokens: jax.Array  # int32 [M, K * S]; 0 at padding
    valid: jax.Array  # bool [M, K]: the window's steps of its last step's episode
    targets: jax.Array  # bool [M, K * S]: position j's next token j + 1 is predicted
    reward: jax.Array  # float32 [M]: the reward of the last step's action
    has_reward: jax.Array  # bool [M]: the last step is not its episode's LAST


def windows(codec: Codec, steps: Experience) -> Windows:
    """The windows of steps [K + 1, M] (time-major): steps 0..K-1 serialized and
    interleaved, masked to the episode of step K-1; step K gives the reward."""
    layout = codec.layout
    k, s = layout.n_steps, layout.step_tokens
    observation_tokens = codec.observation_tokens(steps.observation[:k])  # [K, M, O]
    action_tokens = serialization.serialize(codec.action, steps.action[:k])  # [K, M, A]
    step_tokens = jnp.concatenate([observation_tokens, action_tokens], axis=-1)  # [K, M, S]
    first = steps.step_type[:k] == StepType.FIRST
    # A step belongs to the last step's episode when no FIRST step follows it in the window.
    later_firsts = jnp.cumsum(first[::-1], axis=0)[::-1] - first  # FIRSTs after each step
    valid = (later_firsts == 0).T  # [M, K]
    last = (steps.step_type[:k] == StepType.LAST).T  # [M, K]: their actions are padding
    predicted = (
        jnp.ones(valid.shape + (s,), bool)
        .at[..., layout.observation_tokens :]
        .set(~last[..., None])
    )
    token_valid = jnp.repeat(valid, s, axis=-1)  # [M, K * S]
    predicted = token_valid & predicted.reshape(token_valid.shape)
    targets = jnp.concatenate(
        [token_valid[:, :-1] & predicted[:, 1:], token_valid[:, -1:] & False], 1
    )
    window = jnp.swapaxes(step_tokens, 0, 1).reshape(token_valid.shape)
    return Windows(
        tokens=jnp.where(token_valid, window, 0),
        valid=valid,
        targets=targets,
        reward=steps.reward[k],
        has_reward=steps.step_type[k - 1] != StepType.LAST,
    )


def next_tokens(tokens_):
    """The token each position predicts (the last position's is never a target)."""
    return jnp.concatenate([tokens_[:, 1:], tokens_[:, :1]], axis=1)


def _masked_mean(x, mask):
    mask = mask.astype(jnp.float32)
    return jnp.sum(x * mask) / jnp.maximum(jnp.sum(mask), 1.0)


def losses(model: WorldModel, params, batch: Windows, reward_cost: float):
    """(total loss, metrics): next-token cross-entropy over the targets, plus
    ``reward_cost`` times the squared error of the reward."""
    logits, reward = model.apply(params, batch.tokens, batch.valid)
    targets = next_tokens(batch.tokens)
    cross_entropy = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
    token_loss = _masked_mean(cross_entropy, batch.targets)
    reward_loss = _masked_mean((reward - batch.reward) ** 2, batch.has_reward)
    accuracy = _masked_mean(jnp.argmax(logits, -1) == targets, batch.targets)
    total = token_loss + reward_cost * reward_loss
    return total, {
        "loss/total": total,
        "loss/next_token": token_loss,
        "loss/reward": reward_loss,
        "train/next_token_accuracy": accuracy,
    }


def every_window(steps: Experience, length: int) -> Experience:
    """Steps [N] of whole episodes -> the sequences [length, N] whose step ``length - 2``
    is each step in turn (indices clamped at both ends: a window reaching before the first
    step is masked by its FIRST step, one past the last has no reward to read)."""
    n = steps.step_type.shape[0]
    index = jnp.arange(n)[None, :] + jnp.arange(length)[:, None] - (length - 2)
    index = jnp.clip(index, 0, n - 1)
    return jax.tree.map(lambda x: x[index], steps)


def score(model: WorldModel, codec: Codec, params, steps: Experience) -> dict:
    """The metrics of the windows ending at every step of ``steps`` [N] (held-out
    episodes one after another)."""
    batch = windows(codec, every_window(steps, codec.layout.n_steps + 1))
    logits, reward = model.apply(params, batch.tokens, batch.valid)
    targets = next_tokens(batch.tokens)
    predicted = jnp.argmax(logits, -1)
    counts = (
        jnp.zeros(logits.shape[-1])
        .at[targets.reshape(-1)]
        .add(batch.targets.reshape(-1).astype(jnp.float32))
    )
    most_frequent = jnp.argmax(counts)
    # The last step's observation, decoded from the digits predicted for it, against the
    # observation written (bin centres) and the one before it.
    read = codec.layout.observation_positions[-1] - 1
    decoded = serialization.deserialize(codec.observation, predicted[:, read])
    written = serialization.deserialize(
        codec.observation, codec.observation_tokens(steps.observation)
    )
    before = jnp.concatenate([written[:1], written[:-1]])
    has_before = steps.step_type != StepType.FIRST
    per_step = jnp.mean(jnp.abs(decoded - written), axis=-1)
    repeat = jnp.mean(jnp.abs(before - written), axis=-1)
    return {
        "next_token_accuracy": _masked_mean(predicted == targets, batch.targets),
        "most_frequent_token_accuracy": _masked_mean(targets == most_frequent, batch.targets),
        "observation_error": _masked_mean(per_step, has_before),
        "repeat_observation_error": _masked_mean(repeat, has_before),
        "reward_error": _masked_mean(jnp.abs(reward - batch.reward), batch.has_reward),
    }


def make_world_model(spec: EnvSpec, config: WorldModelConfig, devices=None) -> Agent:
    steps_codec = codec(spec, config)
    layout = steps_codec.layout
    model = WorldModel(config.vocab_size, layout, config.tokens)
    hyper = learning.Hyperparameters(config, ("learning_rate",))
    optimizer = learning.optimizer(config)

    def init(key) -> WorldModelState:
        params = model.init(
            key,
            jnp.zeros((1, layout.n_tokens), jnp.int32),
            jnp.ones((1, layout.n_steps), bool),
        )
        return WorldModelState(
            params=params,
            opt_state=optimizer.init(params),
            update_step=jnp.zeros((), jnp.int32),
            controls=hyper.initial_controls(),
        )

    def update(state: WorldModelState, batch: Experience, key):
        del key
        examples = windows(steps_codec, batch)
        grads, metrics = jax.grad(
            lambda p: losses(model, p, examples, config.reward_cost), has_aux=True
        )(state.params)
        grads, metrics = parallel.device_mean((grads, metrics))
        learning_rate = hyper("learning_rate", state.update_step, state.controls)
        params, opt_state = optimizer.step(grads, state.opt_state, state.params, learning_rate)
        metrics.update(learning.gradient_metrics(config, {"": (grads, state.params)}))
        metrics.update(hyper.metrics(state.update_step, state.controls))
        new_state = state._replace(
            params=params, opt_state=opt_state, update_step=state.update_step + 1
        )
        return new_state, metrics

    update = learning.data_parallel(update, devices or jax.devices(), ALGO, config.batch_size)

    def make_replay(num_envs: int, name: str | None = None, **sizes):
        name = replayers.check_name(name or SERVED[0], SERVED, ALGO)
        fields = dict(
            num_envs=num_envs,
            batch_size=config.batch_size,
            sequence_length=config.sequence_length,
            min_size=config.sequence_length,
        )
        return replayers.make_replay(name, replayers.ReplaySizes(**{**fields, **sizes}))

    def learn(state, replay, replay_state, key):
        sample_key, update_key = jax.random.split(key)
        batch, replay_state = replay.sample(replay_state, sample_key)
        state, metrics = update(state, learning.time_major(batch), update_key)
        return state, replay_state, {**metrics, "train/updates": jnp.ones((), jnp.float32)}

    def scored(state: WorldModelState, steps: Experience) -> dict:
        return score(model, steps_codec, state.params, steps)

    return Agent(
        name=ALGO,
        config=config,
        spec=spec,
        unroll_length=1,
        init=init,
        initial_carry=lambda batch_size: (),
        act=None,
        policy=None,
        update=update,
        make_replay=make_replay,
        learn=learn,
        params=lambda state: state.params,
        replayers=SERVED,
        scoring=Scoring(
            holdout=config.holdout,
            score=scored,
            headline="next_token_accuracy",
            quantity="held-out next-token accuracy",
        ),
    )


register(ALGO, WorldModelConfig, make_world_model)
