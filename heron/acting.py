"""A trained run's policy acting on raw observations, on the host: ``Policy`` (what
``heron.load`` returns) and ``EvaluationVideos`` (a training run's ``--video-every-n``).
Both are built from a run's ``Setup`` (its agent and source) and a ``TrainState``; loading
them from a run directory is heron.policy's."""

from __future__ import annotations

import jax
import numpy as np

from heron import video
from heron.specs import flatten_observation, observation_batch_ndim
from heron.types import StepType, TimeStep


class Policy:
    """A trained run's policy, acting on raw observations as its environment gives them:

        policy = heron.load("runs/cartpole")           # the latest checkpoint (best=True: best)
        action = policy(observation)                   # [*obs] -> action, or [B, *obs] -> [B, ...]
        action = policy(observation, action_mask=legal)  # where the env gives action masks
        action = policy({"image": ..., "speed": ...})  # a Dict observation, as the env gives it
        policy.reset()                                 # before new episodes (recurrent, history)

    Observations go through the run's pipeline (normalisation with the statistics it
    learnt, history stacking); the first call after ``reset`` starts the episodes. Acting is
    greedy unless a ``temperature`` is given (here or per call). Several seeds: the first's.
    """

    def __init__(self, setup, state, checkpoint: int, temperature: float = 0.0):
        self.setup, self.temperature = setup, temperature
        self.use(state, checkpoint)
        self._key = jax.random.PRNGKey(0)
        agent, pipeline = setup.agent, setup.source.pipeline

        def step(agent_state, observations, carry, raw, key, temperature):
            observations, timestep = pipeline.apply(observations, raw, update_stats=False)
            action, carry = agent.policy(agent_state, timestep, carry, key, temperature)
            return action, carry, observations

        self._step = jax.jit(step)

    def use(self, state, checkpoint: int) -> None:
        """Acts with another TrainState of the same run (its first seed's) from now on, the
        compiled step kept; the episodes under way are forgotten."""
        first_seed = jax.tree.map(lambda x: x[0], state)
        self.agent_state, self.checkpoint = first_seed.agent_state, checkpoint
        self._statistics = self.setup.source.observations(first_seed.source_state)
        self._batch = None

    @property
    def spec(self):
        """The environment's EnvSpec (observation shape, action space)."""
        return self.setup.source.pipeline.env_spec

    def reset(self) -> None:
        """Forgets the episodes under way: the next call starts new ones."""
        self._batch = None

    def __call__(self, observation, temperature: float | None = None, action_mask=None):
        parts = self.spec.observation_parts
        if parts:  # a Dict or Tuple observation, flattened as the run's environment did
            batch_ndim = observation_batch_ndim(parts, observation)
            observation = flatten_observation(parts, observation, batch_ndim, np.float32)
        observation = np.asarray(observation, np.float32)
        shape = self.spec.observation_shape
        single = observation.shape == shape
        batch = observation[None] if single else observation
        if batch.shape[1:] != shape:
            raise ValueError(
                f"observation of shape {observation.shape} does not fit the run's "
                f"{shape} (or [batch, *{shape}])"
            )
        size = batch.shape[0]
        masks = self._action_masks(action_mask, size, single)
        first = self._batch != size
        if first:
            pipeline = self.setup.source.pipeline
            self._observations = pipeline.with_history_for(self._statistics, size)
            self._carry = self.setup.agent.initial_carry(size)
            self._batch = size
        raw = TimeStep(
            step_type=np.full(size, StepType.FIRST if first else StepType.MID, np.int32),
            reward=np.zeros(size, np.float32),
            discount=np.ones(size, np.float32),
            observation=batch,
            action_mask=masks,
        )
        self._key, key = jax.random.split(self._key)
        temperature = self.temperature if temperature is None else temperature
        action, self._carry, self._observations = self._step(
            self.agent_state, self._observations, self._carry, raw, key, float(temperature)
        )
        action = np.asarray(action)
        return action[0] if single else action

    def _action_masks(self, action_mask, size: int, single: bool):
        """The legal actions [size, *mask_shape] as the agent takes them: required where the
        run's environment gave masks, refused where it did not."""
        spec = self.spec
        if not spec.action_mask:
            if action_mask is not None:
                raise ValueError(
                    "action_mask given, but this run's environment gave no action masks: its "
                    "policy does not act on them"
                )
            return ()
        if action_mask is None:
            raise ValueError(
                "this run's environment gives action masks: call policy(observation, "
                f"action_mask=...) with the legal actions, shaped {spec.action_mask_shape}"
            )
        mask = np.asarray(action_mask, bool)
        wanted = spec.action_mask_shape if single else (size, *spec.action_mask_shape)
        if mask.shape != wanted:
            raise ValueError(f"action_mask of shape {mask.shape} does not fit {wanted}")
        return mask[None] if single else mask


class EvaluationVideos:
    """A training run's evaluation videos (``--video-every-n``): one greedy episode of the
    current policy in the environment's Gymnasium twin, played on the host with the run's
    observation pipeline (a ``Policy``; the first seed's, with several)."""

    def __init__(self, setup):
        import gymnasium

        self._setup = setup
        self._env = gymnasium.make(video.render_id(setup.run.env), render_mode="rgb_array")
        self._policy = None

    def record(self, state, steps: int) -> tuple[list[np.ndarray], float]:
        """The frames of one greedy episode of ``state``'s policy (the episode seeded by
        ``steps``) and its return."""
        if self._policy is None:
            self._policy = Policy(self._setup, state, steps)
        else:
            self._policy.use(state, steps)
        frames, returns = video.play(self._policy, self._env, 1, steps)
        return frames, returns[0]

    def close(self) -> None:
        self._env.close()
