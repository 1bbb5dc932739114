"""The ``orchestrate`` command.

Two things for its start, before anything else of the command is loaded (this runs first):

- pydantic's search for plugins, done when it builds its first model, made cheap where no plugin
  is installed (cli/pydantic_plugins.py; ~30 ms of CPU before the agent's first entry).  A library
  user's process, which imports no ``orchestrate.cli``, keeps pydantic's own.
- the cyclic garbage collector paused while the command loads (:func:`pause_collector`, called by
  cli/early.py's ``main`` only): loading the CLI, pydantic, anyio and the run makes a few hundred
  thousand objects, and the collector's passes over them cost ~30-40 ms of CPU (a tenth of what
  ``orchestrate run`` spends before its agent's first entry, beside the agent's own start-up),
  for no garbage worth collecting that soon.  It is resumed when the agent's first entry is out,
  a few seconds after the run began, when the run ends, at once for any other command, and when
  ``main`` returns (cli/main.py, cli/recording.py).
"""

import gc

from .pydantic_plugins import install

__all__ = ["pause_collector", "resume_collector"]

install()

_paused: list[bool] = []  # the collector was on and is paused by us


def pause_collector() -> None:
    """Pause the cyclic garbage collector (unless it is off already: then it is left off)."""
    if gc.isenabled() and not _paused:
        _paused.append(True)
        gc.disable()


def resume_collector() -> None:
    """Turn the collector back on, if :func:`pause_collector` paused it; any thread, any number of
    times."""
    if _paused:
        _paused.clear()
        gc.enable()
