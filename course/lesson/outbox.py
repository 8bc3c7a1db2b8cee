"""How the probes' records leave the student's kernel.

Not as a cell's value: the shell writes a value's text with its display formatter, where a cell
can register a printer for ``str`` (the third red team rewrote every record that way). The records
go as a display message of their own type (`RECORDS_MIME`), built and sent with the kernel's
session and socket as they were when the grader's tripwire started (`course.grading.guard.snapshot`
calls `attach` before the first cell a student could have written): the session's class's own
``msg`` and ``send``, its packer and signer, the publisher's socket and IO thread, the streams
``sys.stdout`` and ``sys.stderr``, the classes and modules they come from (compared as
`course.lesson.pristine` compares torch's), no instance attribute hiding one of their methods,
and no display hook. If any of that changed, nothing is sent: the grader finds no records and the
hidden tests earn nothing. Nothing a cell can replace runs between that check and the send: not
the publisher's ``publish``, which first flushes ``sys.stdout`` (the eighth red team's stream
ran there, after the check, and rewrote the records as the session built the message). The
grader takes records only from exactly one such message per block
(`course.grading.probes.read_records`), so one more, sent by the answer, spoils them too.
"""

from __future__ import annotations

import builtins
import sys

from . import pristine

# This module's builtins: a copy, so `builtins.getattr = ...` in a cell changes nothing here.
__builtins__ = dict(vars(builtins))

RECORDS_MIME = "text/x-autograd-course-records"


class Outbox:
    """The kernel's display publisher and what it sends with, as they were at `attach`."""

    def __init__(self):
        self.publisher = None

    def attach(self) -> None:
        """Take the kernel's publisher as it is now; only the first call counts."""
        if self.publisher is not None:
            return
        import ipykernel.iostream
        import ipykernel.zmqshell
        import jupyter_client.session
        from IPython import get_ipython

        publisher = getattr(get_ipython(), "display_pub", None)
        if not isinstance(publisher, ipykernel.zmqshell.ZMQDisplayPublisher):
            return  # not in a kernel: `send` refuses
        session, socket = publisher.session, publisher.pub_socket
        thread = getattr(socket, "io_thread", None)
        # Each link: (object, attribute, what it held).
        self.links = [
            (sys, "stdout", sys.stdout),
            (sys, "stderr", sys.stderr),
            (publisher, "session", session),
            (publisher, "pub_socket", socket),
            (session, "pack", session.pack),
            (session, "auth", session.auth),
        ]
        if thread is not None:
            self.links += [(socket, "io_thread", thread), (thread, "socket", thread.socket)]
        # The last hop too: the zmq socket the IO thread writes to (the seventh red team
        # rewrote records, signed anew, in pyzmq's Socket.send_multipart).
        wire = getattr(thread, "socket", None)
        classes = {
            c
            for obj in (publisher, session, socket, thread, wire)
            for c in type(obj).__mro__
            if c is not object and not c.__flags__ & (1 << 8)  # Py_TPFLAGS_IMMUTABLETYPE
        }
        modules = (ipykernel.zmqshell, ipykernel.iostream, jupyter_client.session)
        self.snapshot = pristine.Snapshot(modules, sorted(classes, key=str), ())
        self.parts = [obj for obj in (publisher, session, socket, thread) if obj is not None]
        self.shadows = _shadows(self.parts)
        # Read from the class now: called unbound, so no later lookup on the session decides.
        self.session, self.socket, self.topic = session, socket, publisher.topic
        self.build, self.transmit = type(session).msg, type(session).send
        self.publisher = publisher

    def intact(self) -> bool:
        """Whether the publisher and everything it sends with are as they were at `attach`."""
        return (
            self.publisher is not None
            and all(getattr(obj, name, None) is held for obj, name, held in self.links)
            and not self.publisher._hooks
            and not self.snapshot.changed()
            and _shadows(self.parts) == self.shadows
        )

    def send(self, text: str) -> None:
        """Send the records' JSON text to the grader, or nothing when the channel was changed."""
        self.attach()  # a kernel the tripwire did not start in: the publisher as it is now
        if not self.intact():
            return
        content = {"data": {RECORDS_MIME: text}, "metadata": {}, "transient": {}}
        parent = self.publisher.parent_header
        message = self.build(self.session, "display_data", content, parent=parent)
        self.transmit(self.session, self.socket, message, ident=self.topic)


def _shadows(parts: list) -> set[tuple[int, str, int]]:
    """The instance attributes of ``parts`` that hide a method of their class (``session.send
    = ...``), as (object, name, value) ids."""
    return {
        (id(obj), name, id(value))
        for obj in parts
        for name, value in vars(obj).items()
        if any(callable(vars(c).get(name)) for c in type(obj).__mro__)
    }


OUTBOX = Outbox()
