"""The course's patch of jupyter_client 8.10.0 (pinned in requirements.txt): a kernel client that
sends while it waits for a message is still woken when the message arrives (issue 38).

Runs in: every process with a kernel client: a worker, the grader, the tests.

An asyncio kernel client's channel sends through a plain shadow of its ``zmq.asyncio`` socket
(jupyter_client's ``Session.send``). The send makes libzmq take in the socket's pending commands,
among them the news that a message has arrived, and that clears the socket's edge-triggered file
descriptor: the message sits in the socket, the event loop is never woken for it, and a poll
waiting for it sleeps until its timeout, which then finds it. nbclient sends on the shell channel
while it waits for a cell's reply whenever the cell writes into an ipywidgets ``Output`` (its
stand-in for the front end's widget sends the outputs back to the kernel), so on a busy machine
such a cell now and then waited out its whole timeout, and the run went on as if nothing had
happened. JupyterLab's server sends through ``ZMQStream``, which looks again after each send.
The upstream report, with a minimal reproduction: docs/developer-notes.md.
"""

from __future__ import annotations

import zmq
from jupyter_client.channels import AsyncZMQSocketChannel

_released_send = AsyncZMQSocketChannel.send


def _send_and_look_again(self: AsyncZMQSocketChannel, msg: dict) -> None:
    _released_send(self, msg)
    # zmq.asyncio's get(EVENTS) wakes a waiting poll or recv whose message is already there.
    self.socket.get(zmq.EVENTS)


def install() -> None:
    """Patch the channels of every asyncio kernel client of this process (again: no change)."""
    AsyncZMQSocketChannel.send = _send_and_look_again
