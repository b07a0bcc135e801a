"""A healthy API server as far as Kokumi's check asks it, for tests that need one on a socket of
their own (a certificate or a header line of theirs): ``GET /version``, the ``POST`` of a
SelfSubjectReview and of a SelfSubjectAccessReview (allowed), on one kept-alive TLS connection;
and a check made on both of the probe's paths, which must find the same."""

from __future__ import annotations

import json

import trio

from kokumi.core.cluster.status import Outcome
from kokumi.core.kubeconfig.connection import Connection
from kokumi.runtime.probe import checks
from kokumi.runtime.probe.checks import check
from kokumi.testing import canary

ACCESS_REVIEW_PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


def access_review(allowed: bool) -> bytes:
    """The SelfSubjectAccessReview an API server answers, ``allowed`` or not."""
    return json.dumps(
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "status": {"allowed": allowed},
        }
    ).encode()


def review(username: str) -> bytes:
    """The SelfSubjectReview an API server answers for ``username``."""
    return json.dumps(
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "SelfSubjectReview",
            "status": {"userInfo": {"username": username}},
        }
    ).encode()


async def answer_checks(
    stream: trio.SSLStream[trio.SocketStream],
    *,
    version: bytes,
    username: str,
    token: str | None = None,
    extra: str | None = None,
) -> None:
    """Answer every request on ``stream`` until the client goes: ``version`` for ``/version``,
    an allowed access review for a SelfSubjectAccessReview, the review of ``username`` for
    anything else. ``token``: the bearer token every request must carry; ``extra``: one more
    header line in every answer."""
    buffer = b""
    head_extra = f"{extra}\r\n" if extra else ""
    try:
        while True:
            while b"\r\n\r\n" not in buffer:
                data = await stream.receive_some(65536)
                if not data:
                    return
                buffer += data
            head, _, buffer = buffer.partition(b"\r\n\r\n")
            first, *lines = head.decode("latin-1").split("\r\n")
            headers = {
                k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines)
            }
            length = int(headers.get("content-length", "0"))
            while len(buffer) < length:
                buffer += await stream.receive_some(65536)
            buffer = buffer[length:]
            if token is not None:
                assert headers["authorization"] == f"Bearer {token}"
            target = first.split(" ")[1]
            asked_version = target == "/version"
            if asked_version:
                body = version
            elif target == ACCESS_REVIEW_PATH:
                body = access_review(allowed=True)
            else:
                body = review(username)
            status = "200 OK" if asked_version else "201 Created"
            await stream.send_all(
                f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n{head_extra}"
                f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass  # the client refused the certificate, or went
    finally:
        await trio.aclose_forcefully(stream)


async def both(target: Connection) -> Outcome:
    """Check on the lean path and through httpx: the Outcomes must be equal."""
    checks._answers_of_run().clear()  # each path asks every question
    lean = await check(target, timeout=5)
    checks._answers_of_run().clear()
    checks._LEAN = False
    try:
        through_httpx = await check(target, timeout=5)
    finally:
        checks._LEAN = True
    assert lean == through_httpx
    assert canary.found(repr(lean)) == []
    return lean
