"""An exception a user's environment raised, in one line that says which environment, in
which call and what it said (its traceback is not heron's to print)."""

from __future__ import annotations

import contextlib


class EnvironmentRaised(RuntimeError):
    """``env_id``'s ``call`` (its constructor, reset or step) raised ``error``."""

    def __init__(self, env_id: str, call: str, error: BaseException):
        text = " ".join(str(error).split()) or "(no message)"
        super().__init__(
            f"the environment {env_id} raised {type(error).__name__} in {call}: {text}"
        )
        self.env_id, self.call, self.error = env_id, call, error


def raised_by_user(error: BaseException) -> bool:
    """Whether ``error`` is the environment's own: not one of heron's refusals, nor a
    missing dependency or a failed download (which ``heron.envs`` names in its own line)."""
    import urllib.error

    import gymnasium

    named_elsewhere = (
        EnvironmentRaised,
        ImportError,
        gymnasium.error.DependencyNotInstalled,
        urllib.error.URLError,
        ConnectionError,
        TimeoutError,
    )
    return not type(error).__module__.startswith("heron") and not isinstance(error, named_elsewhere)


@contextlib.contextmanager
def raised_in(env_id: str, call: str):
    """The environment's own exceptions inside the block become EnvironmentRaised (a JAX
    environment's raise while its step is traced, a Gymnasium environment's in a callback)."""
    try:
        yield
    except Exception as error:
        if not raised_by_user(error):
            raise
        raise EnvironmentRaised(env_id, call, error) from error
