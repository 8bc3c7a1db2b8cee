"""The Execute preprocessor used for grading: nbgrader's, with a kernel death noticed at once."""
from __future__ import annotations

from nbclient.exceptions import DeadKernelError
from nbclient.util import ensure_async
from nbgrader.preprocessors import Execute


class GradingExecute(Execute):
    """nbgrader's Execute, but a kernel that exits (``os._exit``, a segfault, the OOM killer) is
    reported as dead within a second, instead of surfacing as a cell timeout much later.

    nbclient asks the kernel *client* whether the kernel lives, which without a heartbeat channel
    always says yes; the kernel *manager* knows whether the process is still there.
    """

    async def _async_check_alive(self) -> None:
        if not await ensure_async(self.km.is_alive()):
            self.log.error("Kernel died while waiting for execute reply.")
            raise DeadKernelError("Kernel died")
