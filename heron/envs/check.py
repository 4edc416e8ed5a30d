"""``check(env)``: is an environment fit for heron? Stable-Baselines3's ``check_env`` for
heron's environments.

``env`` is an id (``gym:CartPole-v1``, ``mypkg.envs:MyEnv``, ...), a ``gymnasium.Env``, or a
gymnax environment or ``(env, params)`` pair. The check plays ``steps`` random steps and
reports each problem once, as one line naming the first step where it showed:

- spaces: gymnasium (or gymnax) spaces that heron serves (Box or Discrete observations, or
  Dict and Tuple spaces of Box, MultiBinary and Discrete parts; Discrete, equal-category
  MultiDiscrete or bounded Box actions);
- signatures: ``reset(seed=, options=) -> (observation, info)`` and
  ``step(action) -> (observation, reward, terminated, truncated, info)`` with a number for
  the reward and bools for the flags (gymnax: ``reset_env`` / ``step_env``, which heron calls);
- values: observations of the space's dtype and shape, finite and inside the space (each
  part of a Dict or Tuple by itself); finite rewards;
- determinism: the same seed (JAX: key) and actions give the same observations and rewards;
- episodes: how many ended by termination and by truncation, with notes when none ended or
  when every episode terminated after the same number of steps (a time limit must be a
  truncation: heron bootstraps from a truncated episode's final observation);
- speed: environment steps per second (JAX: 16 environments stepped ``steps`` times each in
  one compiled scan, with the env's own time limit, as training steps them).
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np

from heron.envs.adapters import gymnax_environment_type
from heron.envs.errors import UnknownEnvError
from heron.envs.jax_env import JaxEnv
from heron.envs.registry import make_one
from heron.specs import (
    ILLEGAL_LOGIT,
    SpaceError,
    action_spec_from_space,
    is_composite_space,
    observation_shape_from_space,
)
from heron.types import StepType

DETERMINISM_STEPS = 100  # steps replayed to compare two rollouts of the same seed
JAX_BATCH = 16  # JAX environments stepped together
MASKED_NOTE = (
    "the environment gives action masks: the random actions were drawn among the legal ones, "
    "and PPO and DQN act on them"
)


@dataclasses.dataclass
class EnvCheck:
    """What ``check`` found: ``problems`` (each one line; none means heron can use the env),
    ``notes`` (worth knowing, not wrong) and what the random steps showed."""

    env: str
    kind: str  # "gymnasium" or "jax"
    observation_space: str
    action_space: str
    problems: list[str]
    notes: list[str]
    steps: int = 0
    episodes: int = 0
    terminated: int = 0
    truncated: int = 0
    steps_per_s: float | None = None

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> dict[str, Any]:
        """The JSON line of ``heron check-env``."""
        fields = dataclasses.asdict(self)
        return {"env": fields.pop("env"), "ok": self.ok, **fields}


class _Findings:
    """Problems by kind; the first occurrence of a kind is kept."""

    def __init__(self):
        self.by_kind: dict[str, str] = {}

    def add(self, kind: str, message: str) -> None:
        self.by_kind.setdefault(kind, message)

    def has(self, *kinds: str) -> bool:
        return any(kind in self.by_kind for kind in kinds)

    @property
    def lines(self) -> list[str]:
        return list(self.by_kind.values())


def check(env, steps: int = 1000, seed: int = 0) -> EnvCheck:
    """Checks ``env`` over ``steps`` random steps (see the module docstring)."""
    if steps <= 0:
        raise ValueError(f"steps must be > 0, got {steps}")
    name = env if isinstance(env, str) else type(env).__name__
    made = make_one(env) if isinstance(env, str) else env
    jax_environment = gymnax_environment_type()

    try:
        if isinstance(made, gymnasium.Env):
            return _check_gymnasium(name, made, steps, seed)
        if isinstance(made, jax_environment):
            made = (made, made.default_params)
        if isinstance(made, tuple) and len(made) == 2 and isinstance(made[0], jax_environment):
            return _check_jax(name, made[0], made[1], steps, seed)
    finally:
        if isinstance(env, str) and isinstance(made, gymnasium.Env):
            made.close()
    raise UnknownEnvError(
        "check takes an environment id, a gymnasium.Env, or a gymnax environment or "
        f"(env, params) pair; got {type(env).__name__}"
    )


# --------------------------------------------------------------------------- shared checks


def _check_support(found: _Findings, observation_space, action_space) -> None:
    try:
        observation_shape_from_space(observation_space)
    except SpaceError as error:
        found.add("observation space", str(error))
    try:
        action_spec_from_space(action_space)
    except SpaceError as error:
        found.add("action space", str(error))


def _first(mask: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(mask)[0])


def _check_values(found: _Findings, what: str, values: np.ndarray, where) -> np.ndarray:
    """Adds a problem for the first NaN/inf in ``values``; returns the finite mask."""
    values = np.asarray(values)
    if not np.issubdtype(values.dtype, np.inexact):
        return np.ones(values.shape, bool)
    finite = np.isfinite(values)
    if not finite.all():
        index = _first(~finite)
        found.add(
            f"{what} non-finite",
            f"{where(index)}: the {what} has a non-finite value {values[index]}",
        )
    return finite


def _check_bounds(found: _Findings, obs, low, high, finite, where, leading: int = 0) -> None:
    """A problem for the first entry of ``obs`` outside [low, high]; ``leading`` axes of
    ``obs`` index steps and environments, the rest one observation."""
    obs = np.asarray(obs, np.float64)
    shape = obs.shape[leading:]
    low = np.broadcast_to(np.asarray(low, np.float64), shape)
    high = np.broadcast_to(np.asarray(high, np.float64), shape)
    outside = finite & ~((obs >= low) & (obs <= high))
    if outside.any():
        index = _first(outside)
        entry = index[leading:]
        found.add(
            "observation bounds",
            f"{where(index)}: the observation is outside the observation space: entry "
            f"{entry} is {obs[index]}, outside [{low[entry]}, {high[entry]}]",
        )


def _describe(value) -> str:
    if isinstance(value, tuple):
        return f"a tuple of {len(value)} values"
    return f"a {type(value).__name__}"


# --------------------------------------------------------------------------- gymnasium


def _check_gymnasium(name: str, env: gymnasium.Env, steps: int, seed: int) -> EnvCheck:
    found, notes = _Findings(), []
    observation_space = getattr(env, "observation_space", None)
    action_space = getattr(env, "action_space", None)
    result = EnvCheck(name, "gymnasium", str(observation_space), str(action_space), [], notes)
    for label, space in (("observation_space", observation_space), ("action_space", action_space)):
        if not isinstance(space, gymnasium.spaces.Space):
            found.add(label, f"{label} is {space!r}, not a gymnasium space")
    lengths: list[tuple[int, bool]] = []
    if not found.by_kind:
        _check_support(found, observation_space, action_space)
        if _gym_reset(found, env, observation_space, seed):
            lengths = _gym_random_steps(found, env, steps, seed, result)
        if not found.has("reset", "step", "step raised"):
            _gym_determinism(found, env, action_space, seed, min(steps, DETERMINISM_STEPS))
            result.steps_per_s = _gym_speed(env, action_space, min(steps, 1000), seed)
    result.problems = found.lines
    notes.extend(_episode_notes(result, lengths))
    return result


def _check_gym_observation(found: _Findings, space, obs, where: str) -> None:
    at = lambda index: where  # one observation: the step says where
    if isinstance(space, gymnasium.spaces.Dict | gymnasium.spaces.Tuple):
        _check_gym_parts(found, space, obs, where)
        return
    if isinstance(space, gymnasium.spaces.Box):
        if not isinstance(obs, np.ndarray):
            found.add(
                "observation type",
                f"{where}: the observation is a {type(obs).__name__}; a Box observation space "
                "needs a numpy array",
            )
            obs = np.asarray(obs)
        if obs.dtype != space.dtype:
            found.add(
                "observation dtype",
                f"{where}: the observation has dtype {obs.dtype}, the observation space says "
                f"{space.dtype}",
            )
        if obs.shape != space.shape:
            found.add(
                "observation shape",
                f"{where}: the observation has shape {obs.shape}, the observation space says "
                f"{space.shape}",
            )
            return
        if not np.issubdtype(obs.dtype, np.number) and obs.dtype != bool:
            return
        finite = _check_values(found, "observation", obs, at)
        _check_bounds(found, obs, space.low, space.high, finite, at)
        return
    if not space.contains(obs):
        found.add(
            "observation bounds",
            f"{where}: the observation {obs!r} is not in the observation space {space}",
        )


def _check_gym_parts(found: _Findings, space, obs, where: str) -> None:
    """Each part of a Dict or Tuple observation, checked against its own space."""
    is_dict = isinstance(space, gymnasium.spaces.Dict)
    keys = list(space.spaces) if is_dict else list(range(len(space.spaces)))
    kind, wanted = ("Dict", dict) if is_dict else ("Tuple", tuple)
    if not isinstance(obs, wanted):
        found.add(
            "observation type",
            f"{where}: the observation is a {type(obs).__name__}; a {kind} observation space "
            f"needs a {wanted.__name__} of its parts {keys}",
        )
        return
    present = list(obs) if is_dict else list(range(len(obs)))
    if sorted(map(str, present)) != sorted(map(str, keys)):
        found.add(
            "observation parts",
            f"{where}: the observation has the parts {present}, the observation space {keys}",
        )
        return
    for key in keys:
        _check_gym_observation(found, space.spaces[key], obs[key], f"{where}, part {key!r}")


def _same_observation(first, second) -> bool:
    """Whether two observations (arrays, or Dicts and Tuples of them) are equal."""
    first, second = jax.tree.leaves(first), jax.tree.leaves(second)

    def equal(a, b) -> bool:
        a, b = np.asarray(a), np.asarray(b)
        return np.array_equal(a, b, equal_nan=np.issubdtype(a.dtype, np.inexact))

    return len(first) == len(second) and all(map(equal, first, second))


def _gym_reset(found: _Findings, env, observation_space, seed: int) -> bool:
    """Checks reset's signature and result; True when stepping can follow."""
    try:
        result = env.reset(seed=seed, options=None)
    except TypeError as error:
        found.add(
            "reset",
            f"reset(seed=..., options=...) failed ({error}); gymnasium's reset takes the "
            "keywords seed and options",
        )
        return False
    except Exception as error:
        found.add("reset", f"reset(seed={seed}) raised {_one_line(error)}")
        return False
    if not (isinstance(result, tuple) and len(result) == 2):
        found.add("reset", f"reset must return (observation, info), got {_describe(result)}")
        return False
    observation, info = result
    if not isinstance(info, dict):
        found.add("reset info", f"reset's info must be a dict, got a {type(info).__name__}")
    _check_gym_observation(found, observation_space, observation, "reset")
    return True


def _step_result(found: _Findings, result, where: str):
    """(obs, reward, terminated, truncated, info), or None after adding the problem."""
    if isinstance(result, tuple) and len(result) == 5:
        return result
    if isinstance(result, tuple) and len(result) == 4:
        found.add(
            "step",
            f"{where}: step returned 4 values (the old gym API with one 'done'); gymnasium's "
            "step returns (observation, reward, terminated, truncated, info)",
        )
    else:
        found.add(
            "step",
            f"{where}: step must return (observation, reward, terminated, truncated, info), "
            f"got {_describe(result)}",
        )
    return None


def _check_reward(found: _Findings, reward, where: str) -> None:
    number = isinstance(reward, (int, float, np.integer, np.floating)) or (
        isinstance(reward, np.ndarray) and reward.shape == () and reward.dtype.kind in "iuf"
    )
    if isinstance(reward, (bool, np.bool_)) or not number:
        found.add(
            "reward type",
            f"{where}: the reward must be a number, got a {type(reward).__name__} {reward!r}",
        )
    elif not math.isfinite(float(reward)):
        found.add("reward non-finite", f"{where}: the reward is non-finite ({float(reward)})")


def _check_flag(found: _Findings, name: str, value, where: str) -> None:
    if not isinstance(value, (bool, np.bool_)):
        found.add(
            f"{name} type",
            f"{where}: {name} must be a bool, got a {type(value).__name__} {value!r}",
        )


def _gym_random_steps(
    found: _Findings, env, steps: int, seed: int, result: EnvCheck
) -> list[tuple[int, bool]]:
    """Random steps, counted into ``result``; (length, terminated) of each episode that
    ended."""
    action_space = env.action_space
    action_space.seed(seed)
    length = 0
    lengths = []
    try:
        _, info = env.reset(seed=seed)
    except Exception as error:
        found.add("reset", f"reset(seed={seed}) raised {_one_line(error)}")
        return lengths
    if _gym_mask(env, info) is not None:
        result.notes.append(MASKED_NOTE)
    for t in range(steps):
        where = f"step {t}"
        action = _legal_sample(action_space, _gym_mask(env, info))
        try:
            outcome = env.step(action)
        except Exception as error:
            found.add("step raised", f"{where}: step({action!r}) raised {_one_line(error)}")
            return lengths
        outcome = _step_result(found, outcome, where)
        if outcome is None:
            return lengths
        observation, reward, terminated, truncated, info = outcome
        _check_gym_observation(found, env.observation_space, observation, where)
        _check_reward(found, reward, where)
        _check_flag(found, "terminated", terminated, where)
        _check_flag(found, "truncated", truncated, where)
        if not isinstance(info, dict):
            found.add("step info", f"{where}: step's info must be a dict, got {_describe(info)}")
        result.steps += 1
        length += 1
        if terminated or truncated:
            result.episodes += 1
            result.terminated += bool(terminated)
            result.truncated += bool(truncated) and not terminated
            lengths.append((length, bool(terminated)))
            length = 0
            try:
                _, info = env.reset()
            except Exception as error:
                found.add("reset", f"{where}: reset() after the episode raised {_one_line(error)}")
                return lengths
    return lengths


def _gym_mask(env, info):
    """The legal actions the environment gives after a reset or step (``info["action_mask"]``,
    else its ``action_masks()``, as heron reads them), or None."""
    if isinstance(info, dict) and "action_mask" in info:
        return info["action_mask"]
    try:
        method = env.get_wrapper_attr("action_masks")
    except AttributeError:
        return None
    return method() if callable(method) else None


def _legal_sample(action_space, mask):
    """A random action, among the legal ones where ``mask`` is given."""
    if mask is None:
        return action_space.sample()
    mask = np.asarray(mask, np.int8)
    if isinstance(action_space, gymnasium.spaces.MultiDiscrete):
        return action_space.sample(mask=tuple(mask.reshape(len(action_space.nvec), -1)))
    return action_space.sample(mask=mask)


def _gym_rollout(env, seed: int, action_space, steps: int) -> list[tuple]:
    """Up to ``steps`` random (legal) steps from ``reset(seed=seed)``, the actions drawn from
    ``seed + 1``: the same actions twice where the environment is deterministic."""
    action_space.seed(seed + 1)
    observation, info = env.reset(seed=seed, options=None)
    trace = [(observation, np.asarray(0.0), False, False)]
    for _ in range(steps):
        action = _legal_sample(action_space, _gym_mask(env, info))
        observation, reward, terminated, truncated, info = env.step(action)
        trace.append((observation, np.asarray(reward), terminated, truncated))
        if terminated or truncated:
            break
    return trace


def _gym_determinism(found: _Findings, env, action_space, seed: int, steps: int) -> None:
    try:
        first = _gym_rollout(env, seed, action_space, steps)
        second = _gym_rollout(env, seed, action_space, steps)
    except Exception as error:
        found.add("determinism", f"replaying seed {seed} raised {_one_line(error)}")
        return
    if not _same_observation(first[0][0], second[0][0]):
        found.add(
            "determinism",
            f"reset(seed={seed}) twice gave different observations: draw the env's randomness "
            "from self.np_random after super().reset(seed=seed)",
        )
        return
    for t, (a, b) in enumerate(zip(first[1:], second[1:], strict=False)):
        same = (
            _same_observation(a[0], b[0])
            and np.array_equal(a[1], b[1], equal_nan=True)
            and bool(a[2]) == bool(b[2])
            and bool(a[3]) == bool(b[3])
        )
        if not same or len(first) != len(second):
            found.add(
                "determinism",
                f"step {t}: the same actions after reset(seed={seed}) gave a different "
                "observation, reward or end of episode: draw the env's randomness from "
                "self.np_random",
            )
            return


def _gym_speed(env, action_space, steps: int, seed: int) -> float | None:
    """Steps per second of random actions (drawn beforehand; with action masks, as each step
    allows, their draws timed too)."""
    try:
        _, info = env.reset(seed=seed)
        masked = _gym_mask(env, info) is not None
        actions = [None if masked else action_space.sample() for _ in range(steps)]
        start = time.perf_counter()
        for action in actions:
            if masked:
                action = _legal_sample(action_space, _gym_mask(env, info))
            _, _, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                _, info = env.reset()
        elapsed = time.perf_counter() - start
    except Exception:  # already reported by the checks
        return None
    return round(steps / elapsed, 1) if elapsed > 0 else None


def _one_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}".rstrip(": ")


# --------------------------------------------------------------------------- gymnax (JAX)


def _check_jax(name: str, env, params, steps: int, seed: int) -> EnvCheck:
    found, notes = _Findings(), []
    try:
        observation_space = env.observation_space(params)
        action_space = env.action_space(params)
    except Exception as error:
        message = f"observation_space(params) / action_space(params) raised {_one_line(error)}"
        return EnvCheck(name, "jax", "?", "?", [message], notes)
    result = EnvCheck(
        name,
        "jax",
        _describe_gymnax_space(observation_space),
        _describe_gymnax_space(action_space),
        [],
        notes,
    )
    _check_support(found, observation_space, action_space)
    lengths: list[tuple[int, bool]] = []
    if not found.by_kind and _jax_signatures(found, env, params, observation_space, seed):
        jax_env = JaxEnv(env, params, min(JAX_BATCH, steps), None, name)
        if jax_env.spec.action_mask:
            notes.append(MASKED_NOTE)
        lengths = _jax_rollouts(
            found, jax_env, observation_space, action_space, steps, seed, result
        )
    result.problems = found.lines
    notes.extend(_episode_notes(result, lengths))
    return result


def _describe_gymnax_space(space) -> str:
    if is_composite_space(space):
        children = space.spaces
        items = children.items() if hasattr(children, "items") else enumerate(children)
        inner = ", ".join(f"{key}: {_describe_gymnax_space(child)}" for key, child in items)
        return f"{type(space).__name__}({inner})"
    fields = [f"{k}={getattr(space, k)}" for k in ("n", "shape") if hasattr(space, k)]
    if hasattr(space, "dtype"):
        fields.append(f"dtype={jnp.dtype(space.dtype).name}")
    return f"{type(space).__name__}({', '.join(fields)})"


def _check_jax_observation(found: _Findings, space, obs, where: str) -> None:
    if is_composite_space(space):
        children = space.spaces
        keys = list(children) if hasattr(children, "items") else list(range(len(children)))
        for key in keys:
            try:
                part = obs[key]
            except (KeyError, IndexError, TypeError):
                found.add(
                    "observation parts",
                    f"{where}: the observation has no part {key!r}, which its "
                    f"{type(space).__name__} space has",
                )
                return
            _check_jax_observation(found, children[key], part, f"{where}, part {key!r}")
        return
    obs = jnp.asarray(obs)
    shape = getattr(space, "shape", None)
    if hasattr(space, "low") and shape is not None:
        if obs.dtype != jnp.dtype(space.dtype):
            found.add(
                "observation dtype",
                f"{where}: the observation has dtype {obs.dtype}, the observation space says "
                f"{jnp.dtype(space.dtype)}",
            )
        if tuple(obs.shape) != tuple(shape):
            found.add(
                "observation shape",
                f"{where}: the observation has shape {tuple(obs.shape)}, the observation space "
                f"says {tuple(shape)}",
            )


def _jax_signatures(found: _Findings, env, params, observation_space, seed: int) -> bool:
    """reset_env / step_env once each (heron calls those); True when the shapes let a batched
    rollout follow."""
    key = jax.random.PRNGKey(seed)
    try:
        reset = env.reset_env(key, params)
    except Exception as error:
        found.add("reset", f"reset_env(key, params) raised {_one_line(error)}")
        return False
    if not (isinstance(reset, tuple) and len(reset) == 2):
        found.add("reset", f"reset_env must return (observation, state), got {_describe(reset)}")
        return False
    observation, state = reset
    _check_jax_observation(found, observation_space, observation, "reset")
    action = env.action_space(params).sample(key)
    try:
        step = env.step_env(key, state, action, params)
    except Exception as error:
        found.add("step raised", f"step_env(key, state, action, params) raised {_one_line(error)}")
        return False
    if not (isinstance(step, tuple) and len(step) == 5):
        found.add(
            "step",
            f"step_env must return (observation, state, reward, done, info), got {_describe(step)}",
        )
        return False
    observation, _, reward, done, _ = step
    _check_jax_observation(found, observation_space, observation, "step 0")
    if jnp.shape(reward) != () or not jnp.issubdtype(jnp.asarray(reward).dtype, jnp.number):
        found.add(
            "reward type",
            f"step 0: the reward must be a number (a scalar), got shape {jnp.shape(reward)} "
            f"dtype {jnp.asarray(reward).dtype}",
        )
    if jnp.shape(done) != ():
        found.add("terminated type", f"step 0: done must be a scalar, got shape {jnp.shape(done)}")
    return not found.has("observation shape", "reward type", "terminated type")


def _jax_trace(jax_env: JaxEnv, action_space, key, length: int):
    """Observations [T+1, B, ...], rewards, step types and discounts [T, B] of random steps."""
    reset_key, key = jax.random.split(key)
    state, first = jax_env.reset(reset_key)

    def body(carry, key):
        state, mask = carry
        act_key, env_key = jax.random.split(key)
        if jax_env.spec.action_mask:  # among the legal actions
            logits = jnp.where(mask, 0.0, ILLEGAL_LOGIT).reshape(mask.shape[0], -1, mask.shape[-1])
            actions = jax.random.categorical(act_key, logits).reshape(
                (mask.shape[0],) + jax_env.spec.action.action_shape
            )
        else:
            actions = jax.vmap(action_space.sample)(jax.random.split(act_key, jax_env.num_envs))
        state, timestep = jax_env.step(state, actions, env_key)
        trace = (timestep.observation, timestep.reward, timestep.step_type, timestep.discount)
        return (state, timestep.action_mask), trace

    _, (observations, rewards, step_types, discounts) = jax.lax.scan(
        body, (state, first.action_mask), jax.random.split(key, length)
    )
    observations = jnp.concatenate([first.observation[None], observations])
    return observations, rewards, step_types, discounts


def _jax_rollouts(
    found: _Findings, jax_env: JaxEnv, observation_space, action_space, steps, seed, result
) -> list[tuple[int, bool]]:
    """Random steps of ``jax_env`` as training steps it (time limit, auto-reset), twice with
    the same key; counted into ``result``. (length, terminated) of each whole episode."""
    batch = jax_env.num_envs
    length = steps  # per environment: cheap in one compiled scan
    run = jax.jit(lambda key: _jax_trace(jax_env, action_space, key, length))
    key = jax.random.PRNGKey(seed)
    try:
        first = jax.device_get(jax.block_until_ready(run(key)))
        start = time.perf_counter()
        second = jax.device_get(jax.block_until_ready(run(key)))
        elapsed = time.perf_counter() - start
    except Exception as error:
        found.add("step raised", f"stepping {batch} environments raised {_one_line(error)}")
        return []
    result.steps = batch * length
    result.steps_per_s = round(batch * length / elapsed, 1) if elapsed > 0 else None
    observations, rewards, step_types, discounts = first
    if not all(np.array_equal(a, b, equal_nan=True) for a, b in zip(first, second, strict=True)):
        found.add(
            "determinism",
            f"the same key ({seed}) gave different observations or rewards: the environment "
            "is not a pure function of its key and state",
        )
    at = lambda index: f"step {index[0]} (environment {index[1]})"
    finite = _check_values(found, "observation", observations, at)
    if hasattr(observation_space, "low"):
        low, high = observation_space.low, observation_space.high
        _check_bounds(found, observations, low, high, finite, at, leading=2)
    _check_values(found, "reward", rewards, lambda index: at((index[0] + 1, index[1])))
    last = step_types == StepType.LAST
    result.episodes = int(last.sum())
    result.terminated = int((last & (discounts == 0)).sum())
    result.truncated = result.episodes - result.terminated
    return _episode_lengths(step_types, discounts)


def _episode_lengths(step_types: np.ndarray, discounts: np.ndarray) -> list[tuple[int, bool]]:
    """(length, terminated) of the episodes that start and end within a trace [T, B] (the
    reset's FIRST step is before the trace: the first episode of each lane counts from -1)."""
    lengths = []
    for lane, lane_discounts in zip(step_types.T, discounts.T, strict=True):
        starts = np.concatenate([[-1], np.flatnonzero(lane == StepType.FIRST)])
        for end in np.flatnonzero(lane == StepType.LAST):
            start = starts[starts < end][-1]
            lengths.append((int(end - start), bool(lane_discounts[end] == 0)))
    return lengths


# --------------------------------------------------------------------------- notes


def _episode_notes(result: EnvCheck, lengths: list[tuple[int, bool]]) -> list[str]:
    notes = []
    if result.steps and result.episodes == 0:
        notes.append(
            f"no episode ended in {result.steps} random steps: without a time limit "
            "(--max-timestep) an episode ends only when the environment terminates it"
        )
    terminated = [length for length, by_termination in lengths if by_termination]
    if (
        len(terminated) >= 3
        and len(terminated) == len(lengths)
        and len(set(terminated)) == 1
        and terminated[0] > 1
    ):
        notes.append(
            f"every episode terminated after exactly {terminated[0]} steps: if that is a time "
            "limit, report it as truncated=True (heron bootstraps from a truncated episode's "
            "final observation, never from a terminated one's)"
        )
    return notes
