"""Connecting to Temporal: the address given (``orchestrate worker --temporal ADDRESS``), everything else
from Temporal's own environment configuration, the same every Temporal SDK and the ``temporal`` CLI read:
``TEMPORAL_NAMESPACE``, ``TEMPORAL_API_KEY``, ``TEMPORAL_TLS`` and ``TEMPORAL_TLS_CLIENT_CERT_PATH`` /
``TEMPORAL_TLS_CLIENT_KEY_PATH`` / ``TEMPORAL_TLS_SERVER_CA_CERT_PATH``, ``TEMPORAL_PROFILE`` and
``TEMPORAL_CONFIG_FILE``.  No credential is ever passed on a command line."""

from __future__ import annotations

from typing import Any

from temporalio.client import Client
from temporalio.envconfig import ClientConfig

__all__ = ["connect"]


async def connect(address: str | None = None, namespace: str | None = None) -> Client:
    """A client for ``address`` (default: ``TEMPORAL_ADDRESS``, then localhost:7233)."""
    config: dict[str, Any] = dict(ClientConfig.load_client_connect_config())
    if address:
        config["target_host"] = address
    config.setdefault("target_host", "localhost:7233")
    if namespace:
        config["namespace"] = namespace
    return await Client.connect(**config)
