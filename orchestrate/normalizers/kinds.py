"""One shared instance of each entry type that carries no data of its own.

The models are frozen, so every entry can point at the same one: building a new one per entry
was a pydantic validation per line for nothing.
"""

from __future__ import annotations

from ..entries import AssistantMessage, SystemMessage, Thinking, UserMessage

__all__ = ["ASSISTANT", "SYSTEM", "THINKING", "USER"]

ASSISTANT = AssistantMessage()
SYSTEM = SystemMessage()
THINKING = Thinking()
USER = UserMessage()
