"""The errors of making and running environments, each one line: an id heron cannot resolve
or build here, and an exception a user's environment raised (which environment, in which
call and what it said; its traceback is not heron's to print)."""

from __future__ import annotations

import contextlib
import re


class UnknownEnvError(ValueError):
    """An environment id heron cannot resolve."""


class EnvUnavailableError(ValueError):
    """An environment id heron knows but cannot build here: a missing optional dependency,
    data that must be downloaded, or an id that is not supported."""


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
    missing dependency or a failed download (which ``building`` names in its own line)."""
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


def first_line(error: BaseException) -> str:
    """``Type: first line of the message`` (and, for a SyntaxError, where it is)."""
    lines = str(error).strip().splitlines()
    where = ""
    if isinstance(error, SyntaxError) and error.filename:
        where = f" ({error.filename}, line {error.lineno})"
    return f"{type(error).__name__}: {lines[0] if lines else ''}{where}"


# --------------------------------------------------------------------------- building

_GYMNASIUM_EXTRA = re.compile(r"gymnasium\[([\w-]+)\]")
_NOT_INSTALLED = re.compile(r"^(\S+) is not installed")
# gymnasium's extras that heron pins as extras of its own (pyproject.toml), by name
HERON_EXTRAS = {"mujoco": "mujoco"}


def _missing_dependency(env_id: str, error: Exception) -> str:
    """One line naming the package gymnasium says is missing and the pip extra."""
    message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    package = _NOT_INSTALLED.match(message)
    extra = _GYMNASIUM_EXTRA.search(message)
    if package and extra and extra[1] in HERON_EXTRAS:
        ours = HERON_EXTRAS[extra[1]]
        return (
            f"cannot make {env_id}: it needs {package[1]}, which is not installed; install "
            f'heron\'s {ours} extra: pip install "heron[{ours}]"'
        )
    if package and extra:
        swig = " (Box2D builds with swig: `pip install swig` first)" if extra[1] == "box2d" else ""
        return (
            f"cannot make {env_id}: it needs {package[1]}, which is not installed; install "
            f'gymnasium\'s {extra[1]} extra: pip install "gymnasium[{extra[1]}]"{swig}'
        )
    return f"cannot make {env_id}: {message}"


def _download_failure(env_id: str, downloads: str, error: Exception) -> str:
    reason = getattr(error, "reason", None) or error
    return (
        f"cannot make {env_id}: it downloads {downloads} when it is made, and the download "
        f"failed ({reason}); ids that need network access are not supported offline"
    )


@contextlib.contextmanager
def building(env_id: str, downloads: str = "data"):
    """Turns the ways an id fails to build into one EnvUnavailableError line (``downloads``:
    what the id downloads when it is made, for the line of a failed download)."""
    import urllib.error

    import gymnasium

    try:
        yield
    except gymnasium.error.DependencyNotInstalled as error:
        raise EnvUnavailableError(_missing_dependency(env_id, error)) from None
    except (urllib.error.URLError, ConnectionError, TimeoutError) as error:
        raise EnvUnavailableError(_download_failure(env_id, downloads, error)) from None
    except ImportError as error:
        message = first_line(error).partition(": ")[2]
        if isinstance(error, ModuleNotFoundError) and error.name:
            raise EnvUnavailableError(
                f"cannot make {env_id}: it needs the Python package {error.name!r}, which is "
                "not installed"
            ) from None
        raise EnvUnavailableError(f"cannot make {env_id}: {message}") from None
    except gymnasium.error.Error as error:
        raise EnvUnavailableError(f"cannot make {env_id}: {first_line(error)}") from None
    except Exception as error:
        if not raised_by_user(error):
            raise
        raise EnvironmentRaised(env_id, "its constructor", error) from None
