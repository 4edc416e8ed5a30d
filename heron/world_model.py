"""A world model: the token policy's transformer body trained as a next-token model on
serialized trajectories of a dataset (Trax's world-model pretraining, whose output dir
``init_policy_from_world_model_output_dir`` initialises a policy).

    heron train world-model --dataset DATASET --env gymnax:CartPole-v1 --vocab-size 32
    heron train ppo --ppo.vocab-size 32 --init-from RUN_DIR       # the body copied

Each training example is a window of the last ``tokens.history`` steps of an episode,
``[o, a, ..., o, a]`` exactly as the token policy reads it (right-aligned, earlier steps
padding at an episode's start; the episode's last observation has padding action tokens
that are never predicted). The model (``TokenBody`` under ``body``, as in
``heron.networks.tokens.TokenPolicyValue``) predicts every next token (observation digits
and actions) and, from the window's last action, its reward. A held-out share of the
episodes measures the next-token accuracy (against a unigram baseline: the most frequent
training token) and the observation-prediction error (the last step's observation decoded
from the predicted digits, teacher-forced, against repeating the previous observation).

The run directory is a heron run's: config.json (``"algo": "world-model"``),
metrics.jsonl (train lines, and evaluation lines whose ``return_mean`` is the held-out
next-token accuracy, so ``heron plot`` draws it), checkpoints/, tb/.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import time
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from heron import envs, serialization
from heron.configs import ConfigError, check, integer, number, validate
from heron.networks import tokens
from heron.networks.tokens import TokenConfig
from heron.offline.dataset import check_against_env, content_hash, read_dataset
from heron.training import checkpoints, rundir, signals
from heron.training.logging import RunLogger

ALGO = "world-model"
QUANTITY = "held-out next-token accuracy"


@dataclasses.dataclass(frozen=True)
class WorldModelConfig:
    """A world-model run: the dataset, the model and its training."""

    dataset: str | None = None
    """The Minari dataset directory (``heron collect`` writes one)."""
    env: str = "gymnax:CartPole-v1"
    """The environment of the dataset: its spaces define the serialization."""
    env_module: str | None = None
    """Python module imported before the environment is made."""
    vocab_size: int = integer(32, 2)
    """Tokens in the vocabulary; a token PPO policy initialised from this run needs the same
    (--ppo.vocab-size)."""
    tokens: TokenConfig = dataclasses.field(default_factory=TokenConfig)
    """The transformer body and the observation serialization; a policy initialised from
    this run needs the same (--ppo.tokens.*)."""
    steps: int = integer(2_000, 1)
    """Gradient updates."""
    batch_size: int = integer(64, 1)
    """Windows per update."""
    learning_rate: float = number(1e-3, 0.0, low_open=True)
    """Adam step size."""
    normalize_observations: bool = False
    """Standardise observations by the training episodes' mean and std (clipped to +-10, as
    the run option does) before writing them as tokens: for a policy that will train with
    --normalize-observations, so that tokens mean about the same values to both."""
    reward_cost: float = number(1.0, 0.0)
    """Weight of the reward loss (squared error) beside the next-token cross-entropy."""
    holdout: float = number(0.1, 0.0, 1.0, low_open=True, high_open=True)
    """Share of the episodes held out for evaluation (at least one episode)."""
    eval_every_n: int = integer(200, 1)
    """Evaluate every n updates (and at the end)."""
    save_every_n: int = integer(1_000, 1)
    """Checkpoint every n updates (and at the end)."""
    keep_checkpoints: int = integer(3, 1)
    """How many of the latest checkpoints to keep."""
    seed: int = integer(0, 0)
    """Random seed of the initialisation, the split and the batches."""
    run_dir: str | None = None
    """Where to write the run; default runs/world-model_<env>_<time>."""
    checkpoints: bool = True
    """Save checkpoints (--no-checkpoints: none; the run cannot initialise another)."""
    summaries: bool = True
    """Write metrics.jsonl and TensorBoard summaries."""

    def __post_init__(self):
        validate(self, "")
        check(
            self.dataset is not None and bool(self.dataset),
            "a world model trains on a dataset: give --dataset DIR (`heron collect` writes one)",
        )
        tokens.check_token_config(self.tokens, "tokens")


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
    params: dict
    opt_state: tuple
    step: jax.Array  # int32: updates taken


class Windows(NamedTuple):
    """Training examples, one per (episode, step): [N, ...]."""

    tokens: np.ndarray  # int32 [N, K * S]
    valid: np.ndarray  # bool [N, K]
    targets: np.ndarray  # bool [N, K * S]: position j's next token j + 1 is predicted
    reward: np.ndarray  # float32 [N]: the last step's reward
    has_reward: np.ndarray  # bool [N]: False at an episode's final observation
    observation: np.ndarray  # float32 [N, O']: the last step's observation, clipped
    previous: np.ndarray  # float32 [N, O']: the step before's (the repeat baseline)
    has_previous: np.ndarray  # bool [N]


def _model_parts(observation_size: int, action_spec, config: WorldModelConfig, categories=None):
    """Serializations, layout and model; Discrete observations (``categories``) are one
    exact token per value, as a token policy writes them."""
    observation, action, layout = tokens.serializations(
        (observation_size,), action_spec, config.vocab_size, config.tokens, categories
    )
    return observation, action, layout, WorldModel(config.vocab_size, layout, config.tokens)


class Standardise(NamedTuple):
    """Observations -> (observation - mean) / std, clipped like ObservationPipeline's."""

    mean: np.ndarray
    std: np.ndarray
    clip: float = 10.0

    def __call__(self, observations):
        return np.clip((observations - self.mean) / self.std, -self.clip, self.clip)

    @classmethod
    def of(cls, episodes) -> Standardise:
        flat = np.concatenate(
            [np.asarray(e.observations, np.float64).reshape(e.num_steps + 1, -1) for e in episodes]
        )
        return cls(flat.mean(0).astype(np.float32), np.sqrt(flat.var(0) + 1e-8).astype(np.float32))


def _identity(observations):
    return observations


def _serialize_episodes(episodes, observation_ser, action_ser, transform=_identity):
    """[(observation tokens [T + 1, O], action tokens [T + 1, A] (the last: padding))] per
    episode; every episode serialized in one call (one shape, one compilation)."""
    observations, actions, lengths = [], [], []
    for episode in episodes:
        steps = episode.num_steps
        observations.append(np.asarray(episode.observations, np.float32).reshape(steps + 1, -1))
        padded = np.asarray(episode.actions, np.int32).reshape((steps,) + action_ser.shape)
        actions.append(np.concatenate([padded, np.zeros((1,) + action_ser.shape, np.int32)]))
        lengths.append(steps + 1)
    observations = transform(np.concatenate(observations)).astype(np.float32)
    if observation_ser.kind != "box":  # Discrete observations: the categories themselves
        observations = np.rint(observations).astype(np.int32)
    obs_tokens = np.asarray(serialization.serialize(observation_ser, observations))
    act_tokens = np.asarray(serialization.serialize(action_ser, np.concatenate(actions)))
    decoded = np.asarray(serialization.deserialize(observation_ser, obs_tokens))
    cuts = np.cumsum(lengths)[:-1]
    return list(
        zip(
            np.split(obs_tokens, cuts),
            np.split(act_tokens, cuts),
            np.split(decoded, cuts),
            strict=True,
        )
    )


def make_windows(episodes, observation_ser, action_ser, layout, transform=_identity) -> Windows:
    """Every window of ``layout.n_steps`` steps ending at each step of each episode
    (observations passed through ``transform`` first)."""
    k, s = layout.n_steps, layout.step_tokens
    parts = []
    serialized = _serialize_episodes(episodes, observation_ser, action_ser, transform)
    for episode, (obs_tokens, act_tokens, clipped) in zip(episodes, serialized, strict=True):
        steps = episode.num_steps
        step_tokens = np.concatenate([obs_tokens, act_tokens], axis=-1)  # [T + 1, S]
        # is each token predicted (as the next token of the one before)? Not the padding
        # action of the final observation.
        predicted = np.ones((steps + 1, s), bool)
        predicted[steps, layout.observation_tokens :] = False
        ends = np.arange(steps + 1)
        index = ends[:, None] - (k - 1) + np.arange(k)  # [T + 1, K]
        valid = index >= 0
        safe = np.maximum(index, 0)
        window = step_tokens[safe].reshape(steps + 1, k * s)
        token_valid = np.repeat(valid, s, axis=-1)
        target_predicted = token_valid & predicted[safe].reshape(-1, k * s)
        targets = np.zeros_like(token_valid)
        targets[:, :-1] = token_valid[:, :-1] & target_predicted[:, 1:]
        rewards = np.concatenate([np.asarray(episode.rewards, np.float32), [0.0]])
        parts.append(
            Windows(
                tokens=np.where(token_valid, window, 0).astype(np.int32),
                valid=valid,
                targets=targets,
                reward=rewards.astype(np.float32),
                has_reward=ends < steps,
                observation=clipped,  # bin centres: what the tokens say
                previous=np.concatenate([clipped[:1], clipped[:-1]]),
                has_previous=ends >= 1,
            )
        )
    return Windows(*(np.concatenate(field) for field in zip(*parts, strict=True)))


def split_episodes(count: int, holdout: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(training episode indices, held-out ones): a seeded shuffle, at least one of each."""
    if count < 2:
        raise ConfigError(
            f"the dataset holds {count} episode: a world model needs at least 2 (one held out "
            "for evaluation)"
        )
    order = np.random.default_rng(seed).permutation(count)
    held = min(max(1, int(round(holdout * count))), count - 1)
    return np.sort(order[held:]), np.sort(order[:held])


def _losses(model, params, batch: Windows, reward_cost: float):
    logits, reward = model.apply(params, batch.tokens, batch.valid)
    next_tokens = jnp.concatenate([batch.tokens[:, 1:], batch.tokens[:, :1]], axis=1)
    targets = batch.targets.astype(jnp.float32)
    cross_entropy = optax.softmax_cross_entropy_with_integer_labels(logits, next_tokens)
    token_loss = jnp.sum(cross_entropy * targets) / jnp.maximum(jnp.sum(targets), 1.0)
    has_reward = batch.has_reward.astype(jnp.float32)
    reward_loss = jnp.sum((reward - batch.reward) ** 2 * has_reward) / jnp.maximum(
        jnp.sum(has_reward), 1.0
    )
    correct = (jnp.argmax(logits, -1) == next_tokens).astype(jnp.float32)
    accuracy = jnp.sum(correct * targets) / jnp.maximum(jnp.sum(targets), 1.0)
    total = token_loss + reward_cost * reward_loss
    return total, {
        "loss/total": total,
        "loss/next_token": token_loss,
        "loss/reward": reward_loss,
        "train/next_token_accuracy": accuracy,
    }


def evaluate(apply, params, windows: Windows, observation_ser, layout, unigram: int) -> dict:
    """Held-out next-token accuracy (and the unigram baseline's), observation-prediction
    error of the last step's observation (teacher-forced digits; and the error of repeating
    the previous observation), reward error."""
    logits, reward = apply(params, windows.tokens, windows.valid)
    logits, reward = np.asarray(logits), np.asarray(reward)
    next_tokens = np.concatenate([windows.tokens[:, 1:], windows.tokens[:, :1]], axis=1)
    targets = windows.targets
    predicted = logits.argmax(-1)
    accuracy = float((predicted == next_tokens)[targets].mean())
    unigram_accuracy = float((next_tokens == unigram)[targets].mean())
    read = layout.observation_positions[-1] - 1  # the last step's observation digits
    decoded = np.asarray(serialization.deserialize(observation_ser, predicted[:, read]))
    has_previous = windows.has_previous
    error = np.abs(decoded - windows.observation)[has_previous].mean()
    repeat = np.abs(windows.previous - windows.observation)[has_previous].mean()
    has_reward = windows.has_reward
    return {
        "next_token_accuracy": accuracy,
        "unigram_accuracy": unigram_accuracy,
        "observation_error": float(error),
        "repeat_observation_error": float(repeat),
        "reward_error": float(np.abs(reward - windows.reward)[has_reward].mean()),
    }


def _record(config: WorldModelConfig, data) -> dict:
    """config.json of a run: its config, layout and dataset, and the observation statistics
    it standardises with (from the training episodes)."""
    layout, dataset = data.layout, data.dataset
    record = {
        "algo": ALGO,
        ALGO: dataclasses.asdict(config),
        "run": {
            "env": config.env,
            "env_module": config.env_module,
            "dataset": config.dataset,
            "seed": config.seed,
            "seeds": 1,
            "steps": config.steps,
        },
        "layout": {
            "observation_tokens": layout.observation_tokens,
            "action_tokens": layout.action_tokens,
            "n_steps": layout.n_steps,
        },
        "dataset": {**dataset.summary(), "content_sha256": content_hash(dataset)},
    }
    if isinstance(data.transform, Standardise):
        record["observation_statistics"] = {
            "mean": data.transform.mean.tolist(),
            "std": data.transform.std.tolist(),
        }
    return record


def _prepare_run_dir(run_dir: str) -> None:
    os.makedirs(run_dir, exist_ok=True)
    if os.path.exists(os.path.join(run_dir, rundir.CONFIG)):
        raise rundir.RunDirError(
            f"run dir {run_dir!r} already holds a run: choose another --run-dir"
        )


class _Data(NamedTuple):
    """What a run trains and evaluates on, made from its config and dataset."""

    dataset: object
    observation_ser: object
    layout: serialization.TokenLayout
    model: WorldModel
    train_windows: Windows
    held_windows: Windows
    unigram: int  # the most frequent next token of the training windows
    transform: object  # observations -> what is serialized


def _prepare(config: WorldModelConfig) -> _Data:
    envs.import_env_module(config.env_module)
    spec = envs.make(config.env, 1).spec
    dataset = read_dataset(config.dataset)
    check_against_env(dataset, spec, config.env)
    categories = None if config.normalize_observations else spec.observation_categories
    observation_ser, action_ser, layout, model = _model_parts(
        math.prod(spec.observation_shape), spec.action, config, categories
    )
    train_episodes, held_episodes = split_episodes(
        dataset.num_episodes, config.holdout, config.seed
    )
    training = [dataset.episodes[i] for i in train_episodes]
    transform = Standardise.of(training) if config.normalize_observations else _identity
    train_windows = make_windows(training, observation_ser, action_ser, layout, transform)
    held_windows = make_windows(
        [dataset.episodes[i] for i in held_episodes], observation_ser, action_ser, layout, transform
    )
    next_tokens = np.concatenate([train_windows.tokens[:, 1:], train_windows.tokens[:, :1]], axis=1)
    unigram = int(np.bincount(next_tokens[train_windows.targets]).argmax())
    return _Data(
        dataset, observation_ser, layout, model, train_windows, held_windows, unigram, transform
    )


def train(config: WorldModelConfig) -> dict:
    """Trains a world model; returns the final JSON line's fields."""
    data = _prepare(config)
    run_dir = config.run_dir or rundir.default_run_dir(ALGO, config.env)
    _prepare_run_dir(run_dir)
    with rundir.RunLock(run_dir):
        return _train_in(config, run_dir, data)


def resume(run_dir: str, steps: int | None = None) -> dict:
    """Continues a world-model run from its latest checkpoint to its ``steps`` (or to a new
    budget ``steps``), on the same dataset; the result equals the uninterrupted run's."""
    config = load_config(run_dir)
    config = dataclasses.replace(
        config, run_dir=run_dir, **({} if steps is None else {"steps": steps})
    )
    data = _prepare(config)
    recorded = rundir.read_config(run_dir)
    if recorded.get("dataset", {}).get("content_sha256") != content_hash(data.dataset):
        raise ConfigError(
            f"the dataset {config.dataset!r} changed since {run_dir!r} started on it; resume "
            "it on the same data or start a new run"
        )
    with rundir.RunLock(run_dir):
        step = checkpoints.latest_step(run_dir)
        if step is None:
            rundir.restart_from_scratch(run_dir)
            print(
                f"heron: {run_dir!r} stopped before its first checkpoint: starting it again",
                file=sys.stderr,
            )
            return _train_in(config, run_dir, data)
        if step >= config.steps:
            raise ConfigError(
                f"{run_dir!r} has done its {config.steps} steps (checkpoint at {step}); pass "
                "a larger --steps to continue it"
            )
        record = _record(config, data)
        checkpoints.check_unchanged_config(
            run_dir, step, record, ("run.steps", f"{ALGO}.steps", f"{ALGO}.run_dir")
        )
        state, _ = checkpoints.restore(run_dir, _state_template(config, data.layout))
        records = rundir.truncate_metrics(run_dir, step)
        return _train_in(config, run_dir, data, (state, step, records))


def _optimizer(config: WorldModelConfig):
    return optax.chain(optax.clip_by_global_norm(1.0), optax.adam(config.learning_rate))


def _state_template(config: WorldModelConfig, layout) -> WorldModelState:
    model = WorldModel(config.vocab_size, layout, config.tokens)
    params = model.init(
        jax.random.PRNGKey(0),
        jnp.zeros((1, layout.n_tokens), jnp.int32),
        jnp.ones((1, layout.n_steps), bool),
    )
    return WorldModelState(params, _optimizer(config).init(params), jnp.zeros((), jnp.int32))


def _train_in(config, run_dir, data: _Data, resumed=None) -> dict:
    """Trains from the start, or from ``resumed`` = (state, step, metric records kept)."""
    model, layout, observation_ser = data.model, data.layout, data.observation_ser
    train_windows, held_windows, unigram = data.train_windows, data.held_windows, data.unigram
    record = _record(config, data)
    rundir.write_config(run_dir, record)
    optimizer = _optimizer(config)
    init_key, data_key = jax.random.split(jax.random.PRNGKey(config.seed))
    if resumed is None:
        params = model.init(init_key, train_windows.tokens[:1], train_windows.valid[:1])
        state = WorldModelState(params, optimizer.init(params), jnp.zeros((), jnp.int32))
        done, best, wall_offset = 0, -math.inf, 0.0
    else:
        state, done, records = resumed
        evals = [r["return_mean"] for r in records if r.get("kind") == "eval"]
        best = max(evals, default=-math.inf)
        wall_offset = max((r.get("wall_s") or 0.0 for r in records), default=0.0)
    data = jax.tree.map(jnp.asarray, train_windows)
    count = len(train_windows.tokens)

    def update(state: WorldModelState, key):
        index = jax.random.randint(key, (config.batch_size,), 0, count)
        batch = jax.tree.map(lambda x: x[index], data)
        grads, metrics = jax.grad(
            lambda p: _losses(model, p, batch, config.reward_cost), has_aux=True
        )(state.params)
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        return WorldModelState(params, opt_state, state.step + 1), metrics

    @jax.jit
    def chunk(state, keys):
        state, metrics = jax.lax.scan(update, state, keys)
        return state, jax.tree.map(jnp.mean, metrics)

    apply = jax.jit(model.apply)
    logger = RunLogger(run_dir, config.steps, seeds=1, summaries=config.summaries)
    saver = (
        checkpoints.Checkpointer(run_dir, config.keep_checkpoints) if config.checkpoints else None
    )
    start, last = time.monotonic() - wall_offset, {}
    stops = signals.StopRequests()
    try:
        with stops:
            while done < config.steps:
                n = min(config.eval_every_n, config.steps - done)
                keys = jax.random.split(jax.random.fold_in(data_key, done), n)
                state, metrics = chunk(state, keys)
                done += n
                wall = time.monotonic() - start
                logger.write({"kind": "train", "step": done, "seed": config.seed, "wall_s": wall}
                             | {k: float(v) for k, v in metrics.items()})  # fmt: skip
                last = evaluate(apply, state.params, held_windows, observation_ser, layout, unigram)
                best = max(best, last["next_token_accuracy"])
                logger.write(
                    {
                        "kind": "eval",
                        "step": done,
                        "wall_s": wall,
                        "seed": config.seed,
                        "temperature": 0.0,
                        "return_mean": last["next_token_accuracy"],
                        "return_std": None,
                        "episodes": len(held_windows.tokens),
                        "quantity": QUANTITY,
                        **{f"eval/{k}": v for k, v in last.items()},
                    }
                )
                logger.progress(done, done / max(wall, 1e-9), None, last["next_token_accuracy"])
                saved = saver is not None and (
                    done % config.save_every_n == 0 or done >= config.steps
                )
                if saved:
                    saver.save(done, state, record)
                if stops.signal_number is not None:
                    _stop(stops, run_dir, done, state, record, saver, saved)
    finally:
        logger.close()
        if saver is not None:
            saver.close()
    wall = time.monotonic() - start
    return {
        "run_dir": run_dir,
        "steps": done,
        "wall_s": round(wall, 3),
        "steps_per_s": round(done / max(wall, 1e-9), 1),
        "final_eval_accuracy": last["next_token_accuracy"],
        "best_eval_accuracy": best,
        "unigram_accuracy": last["unigram_accuracy"],
        "observation_error": last["observation_error"],
        "repeat_observation_error": last["repeat_observation_error"],
        "train_windows": len(train_windows.tokens),
        "held_out_windows": len(held_windows.tokens),
        "params_digest": rundir.params_digest(state.params),
    }


def _stop(stops, run_dir: str, done: int, state, record: dict, saver, saved: bool) -> None:
    """SIGINT or SIGTERM arrived: save the step reached (unless just saved) and stop."""
    if saver is not None and not saved:
        saver.save(done, state, record)
    raise stops.stopped(done, None if saver is None else done, run_dir)


def load_config(run_dir: str) -> WorldModelConfig:
    record = rundir.read_config(run_dir)
    if record.get("algo") != ALGO:
        raise rundir.RunDirError(f"{run_dir!r} is not a world-model run")
    return rundir.config_from_record(
        WorldModelConfig, record.get(ALGO, {}), os.path.join(run_dir, rundir.CONFIG)
    )


def load_parameters(run_dir: str):
    """The parameters of ``run_dir``'s latest checkpoint (``{"params": {"body": ...,
    "next_token": ..., "reward_head": ...}}``)."""
    config = load_config(run_dir)
    layout = serialization.TokenLayout(**rundir.read_config(run_dir)["layout"])
    state, _ = checkpoints.restore(run_dir, _state_template(config, layout))
    return state.params


__all__ = ["WorldModel", "WorldModelConfig", "evaluate", "load_parameters", "resume", "train"]
