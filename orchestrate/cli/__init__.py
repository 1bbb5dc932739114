"""The ``orchestrate`` command.

Before anything else of the command: pydantic's search for plugins, done when it builds its first
model, made cheap where no plugin is installed (cli/pydantic_plugins.py; ~30 ms of CPU before the
agent's first entry).  A library user's process keeps pydantic's own.
"""

from .pydantic_plugins import install

install()
