"""The server registry, one actor in a package of its sections."""

from kokumi.actors.registry.facts import HANDOVER_REASON, NOT_REGISTERED, Registration, Registry

__all__ = ["HANDOVER_REASON", "NOT_REGISTERED", "Registration", "Registry"]
