"""Whom one request acts for: a user's own token, or a user the connection impersonates."""

from __future__ import annotations

from typing import Any

import attrs

from .errors import ConfigError

__all__ = ["Identity"]


def _header_value(what: str, longest: int = 1024) -> Any:
    def check(instance: Any, attribute: Any, value: str) -> None:
        if not value or len(value) > longest or not value.isprintable() or not value.isascii():
            raise ConfigError(
                f"{what} must be 1 to {longest:,} printable ASCII characters, as an HTTP header "
                "carries"
            )

    return check


def _groups(instance: Identity, attribute: Any, value: tuple[str, ...]) -> None:
    check = _header_value("an impersonated group")
    for group in value:
        check(instance, attribute, group)
    if value and instance.user is None:
        raise ConfigError("groups are impersonated together with a user: name the user too")


@attrs.frozen
class Identity:
    """Whom one request acts for, instead of the connection's own user.

    Either ``token``, a bearer token of that user's own (sent in place of the connection's
    credentials), or ``user`` with ``groups``, which the connection's user impersonates with
    ``Impersonate-User`` and ``Impersonate-Group`` (it needs the ``impersonate`` verb on them).
    A web front end serving many users makes each of its calls as one of them, so that their
    RBAC, not the front end's, decides.
    """

    token: str | None = attrs.field(
        default=None,
        repr=False,
        # An identity provider's ID token is often 1-2 KB with its claims; 16 KiB is far
        # above any token a login hands out and below what servers take in a header.
        validator=attrs.validators.optional(_header_value("a bearer token", 16 * 1024)),
    )
    user: str | None = attrs.field(
        default=None, validator=attrs.validators.optional(_header_value("an impersonated user"))
    )
    groups: tuple[str, ...] = attrs.field(default=(), validator=_groups)

    def __attrs_post_init__(self) -> None:
        if (self.token is None) == (self.user is None):
            raise ConfigError("an identity is a token or a user to impersonate: give one of them")

    def headers(self) -> list[tuple[str, str]]:
        if self.token is not None:
            return [("Authorization", f"Bearer {self.token}")]
        assert self.user is not None
        return [("Impersonate-User", self.user)] + [
            ("Impersonate-Group", group) for group in self.groups
        ]
