"""Stopping cleanly on SIGINT or SIGTERM, for ``kokumi ui`` and ``kokumi demo`` (``kokumi manager``
hands over first: :func:`kokumi.manager.run_manager_until_signalled`)."""

from __future__ import annotations

import logging
import signal
from collections.abc import Awaitable, Callable

import trio

__all__ = ["until_signalled"]


async def until_signalled(async_fn: Callable[..., Awaitable[object]], *args: object) -> object:
    """Run ``async_fn`` until it returns, or until SIGINT or SIGTERM stops it cleanly.

    Kubernetes stops a pod with SIGTERM: cancelling lets every actor, watch and check end inside
    its own nursery, instead of a KeyboardInterrupt tearing through them.
    """
    result: object = None
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:

            async def run() -> None:
                nonlocal result
                result = await async_fn(*args)
                nursery.cancel_scope.cancel()

            nursery.start_soon(run)
            async for signum in signals:
                logging.getLogger("kokumi").info(
                    "%s received: stopping", signal.Signals(signum).name
                )
                nursery.cancel_scope.cancel()
                break
    return result
