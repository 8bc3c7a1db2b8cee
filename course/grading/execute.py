"""The Execute preprocessor used for grading: nbgrader's, with the hidden tests judged outside the
kernel, a sandboxed (and, where a zygote is ready, warm) kernel, time limits that hold on a
loaded machine, bounded output and kernel death noticed at once.

Runs in: the worker that grades a submission (nbgrader's autograde calls it); the kernel it
starts runs the student's notebook.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import os
import queue
import shutil
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient.exceptions import DeadKernelError
from nbclient.util import ensure_async, run_sync
from nbgrader.preprocessors import Execute
from traitlets import Bool, Dict, Float, Integer, Unicode

from . import kernelcalls, shell_wakeup
from .draws import hand_in_draw
from .feedback import short_error
from .hidden import asked_names, is_test_cell, split_hidden
from .judging import Verdict, failure_output, judge, read_records, teaching_output
from .kernelenv import package_view
from .reference import cache_dir, records
from .repair import source_notebook
from .sandbox import Limits, kernel_uid, kill_uid, policy_for, session_cpu_seconds
from .warm import (
    Prefix,
    SandboxedKernelManager,
    leading_code,
    prefix_file,
    prefix_sources,
    zygote_alive,
    zygote_socket,
)

NOT_GRADED = "not graded, the hidden tests decide this cell's points"
MAX_ERROR_TEXT = 4096  # characters of an error's name, value or traceback line kept


class SubmissionTimeout(Exception):
    """The notebook ran past its total time limit."""


class CellTimeLimit(Exception):
    """A cell ran past its CPU-time limit and went on after the interrupt: the kernel was killed."""


class GraderTrouble(Exception):
    """The grader's trouble, not the submission's: the kernel could not start, could not run
    the grader's code before any student code ran, or its zygote went away with it."""


class GradingExecute(Execute):
    """nbgrader's Execute, with:

    - hidden tests judged outside the kernel (`course.grading.judging`): a test cell runs only
      its visible part in place; once the last cell has run, each hidden block's probes run
      outside the notebook's cells and history, on inputs drawn for this submission, and their
      records are compared with the reference's for the same inputs. That verdict alone scores
      a test cell that has hidden tests: a failing one gets a `HiddenTestFailed` error first
      among its outputs (nbgrader scores 0), and what the kernel itself printed there (a failed
      visible test, a value, stderr) is kept as text marked not graded;
    - after each test cell, every name it rebound is put back (`course.lesson.testnames`): the
      hidden tests see the student's helpers as the student left them;
    - each kernel in a sandbox (`course.grading.sandbox`), working in an empty folder of its
      own: an allow-list of paths, its own PID, network and IPC namespaces and uid, limits on
      memory, CPU, processes and file size;
    - a warm start where a zygote serves this notebook (`course.grading.warm`) and the
      notebook's leading code cells are the locked ones it ran: those cells are not run again,
      their recorded outputs are copied in;
    - time limits that hold on a loaded machine: a cell's limit counts the kernel's CPU time
      (`_watch_cpu`), nbclient's wall-clock timeout is a larger backstop, a kernel that ignores
      the interrupt is killed, and the notebook has a total (wall-clock) limit;
    - bounded output: at most ``max_output_kb`` per cell and ``max_notebook_output_kb`` per
      notebook of outputs and widget state (buffers included), an error's text cut to
      `MAX_ERROR_TEXT`, no message of the kernel's larger than ``max_message_mb``;
    - a kernel that exits (``os._exit``, a segfault, the memory limit) reported as dead within a
      second, not as a late cell timeout. nbclient asks the kernel *client* whether the kernel
      lives, which without a heartbeat always says yes; the kernel *manager* knows;
    - a kernel that could not start, or died with its zygote, reported as the grader's trouble
      (`GraderTrouble`), so the job runs again, cold (`course.grading.runner`);
    - a warning on stderr in a test cell kept as stdout: nbgrader scores any stderr as 0.
    """

    warm_dir = Unicode("", help="folder with recorded prefixes and zygote sockets").tag(config=True)
    course_root = Unicode("", help="the course folder (default: the cwd)").tag(config=True)
    draw = Integer(
        -1,
        help="the draw of the submission's hidden inputs (`course.grading.draws`); -1: work it "
        "out from the gradebook's submission time",
    ).tag(config=True)
    expected = Dict(
        help="the reference's records on this submission's draw, by notebook and grade id, as a "
        "job carries them (`course.grading.jobs`); empty: read from the course's cache, or made"
    ).tag(config=True)
    total_timeout = Integer(300, help="seconds (wall clock) for the whole notebook").tag(
        config=True
    )
    wall_factor = Float(
        5.0, help="a cell's wall-clock backstop, in multiples of its CPU-time limit (timeout)"
    ).tag(config=True)
    interrupt_grace = Float(
        5.0, help="seconds a cell past its CPU time has to stop after the interrupt"
    ).tag(config=True)
    # nbclient waits 4 s (wall clock) for a cell's last output after its reply, then fails the
    # notebook: on a loaded machine that failed honest ones. A backstop, not a limit.
    iopub_timeout = Integer(120, help="seconds to wait for a cell's output after its reply").tag(
        config=True
    )
    max_output_kb = Integer(1024, help="output kept per cell").tag(config=True)
    max_notebook_output_kb = Integer(8192, help="output and widget state kept per notebook").tag(
        config=True
    )
    max_message_mb = Integer(
        64, help="the largest message taken from a kernel (a larger one drops its connection)"
    ).tag(config=True)
    memory_mb = Integer(Limits.memory_mb, help="kernel's private memory").tag(config=True)
    cpu_share = Float(Limits.cpu_share, help="cores a kernel may use at most").tag(config=True)
    isolate = Bool(True, help="namespaces and own uid, where the machine allows").tag(config=True)
    reveal_after_due = Bool(
        True,
        help="a failed quick check names the right answer once the assignment's due date has "
        "passed (before it, classmates may still hand in)",
    ).tag(config=True)

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("kernel_manager_class", SandboxedKernelManager)
        super().__init__(*args, **kwargs)
        # A reply that lands while the client sends (a student's Output widget) wakes it: a
        # missed one waited out the rest of the notebook's time limit (issue 38).
        shell_wakeup.install()

    def preprocess(self, nb, resources=None, km=None):
        self._course = Path(self.course_root or os.getcwd())
        self._tests, lead = self._source_cells(resources)
        self._expected = self._expected_records(resources)
        self._probes: list[tuple[int, str, str]] = []  # (cell index, grade id, hidden code)
        self._in_test = False
        self._watching = False
        self._replay = self._matching_prefix(nb, resources, lead)
        self._deadline = time.monotonic() + self.total_timeout
        self._private = tempfile.mkdtemp(prefix="course-kernel-")
        # The package the kernel imports: the zygotes' (whose forks already hold it) or its own.
        self._view = package_view(Path(self.warm_dir or self._private + "-view"))
        # The kernel works in an empty folder of its own, never in autograded/: nbgrader writes
        # the executed notebook there afterwards, as root, and must not follow a link the
        # student's code planted.
        self._workdir = os.path.join(self._private, "work")
        os.mkdir(self._workdir)
        self._cell_output_bytes = self._output_bytes = 0
        self._probing = False
        self._kernel_uid = None
        self._cpu_limit = self._stuck = None
        try:
            nb, resources = super().preprocess(nb, resources, km)
        except DeadKernelError:
            if self._stuck:  # we killed it: the cell would not stop
                raise CellTimeLimit(self._stuck) from None
            if self._zygote and not zygote_alive(self._zygote):  # it took its kernels with it
                raise GraderTrouble("the zygote it was forked from went away") from None
            raise
        finally:
            if self._kernel_uid is not None:  # what the kernel left running dies with it
                kill_uid(self._kernel_uid)
            shutil.rmtree(self._private, ignore_errors=True)
            shutil.rmtree(self._private + "-view", ignore_errors=True)
        return nb, resources

    def _source_cells(self, resources) -> tuple[set[str], list[str]]:
        """The test cells' code as this grader runs it (visible part only where the reference
        has records), and the source's leading locked cells (`course.grading.warm`)."""
        source = source_notebook(resources or {})
        if not source.is_file():
            self.log.warning("no source notebook at %s: hidden tests are run as stock", source)
            return set(), []
        original = nbformat.read(source, as_version=4)
        tests = {split_hidden(c.source)[0] for c in original.cells if is_test_cell(c)}
        tests |= {c.source for c in original.cells if is_test_cell(c)}
        return tests, prefix_sources(original)

    def _expected_records(self, resources) -> dict[str, list[dict]]:
        """The reference's probe records for this notebook on this submission's draw: the
        job's, else the course's (`course.grading.reference`), made now if no run made them."""
        source = source_notebook(resources or {})
        if not source.is_file():
            return {}
        info = (resources or {}).get("nbgrader", {})
        if self.expected:
            self._draw = self.draw
            return self.expected.get(info["notebook"], {})
        # plain `nbgrader autograde` (no draw given): from the hand-in folder, as `grade` draws
        self._draw = (
            self.draw
            if self.draw >= 0
            else hand_in_draw(self._course, info["assignment"], info["student"])
        )
        cache = cache_dir(self._course, info.get("assignment", ""))
        return records(source, cache, [self._draw])[self._draw]

    def _widgets_after_prefix(self, index: int) -> None:
        """Where the prefix ends, restore the widget models it made (warm)."""
        if self._prefix is not None and index == self._leading[-1]:
            self.widget_state.update(copy.deepcopy(self._prefix.widget_state))
            self.widget_buffers.update(
                {
                    comm: {tuple(path): value for path, value in pairs}
                    for comm, pairs in self._prefix.widget_buffers.items()
                }
            )

    def _matching_prefix(self, nb, resources, lead: list[str]) -> dict[int, int]:
        """Map cell index -> prefix position when the notebook's leading code cells are exactly
        the source's leading locked cells (``lead``) and a zygote that ran them serves this
        notebook (`course.grading.warm`); else {}: start cold."""
        self._prefix = self._zygote = None
        info = (resources or {}).get("nbgrader", {})
        leading = self._leading = leading_code(nb, len(lead))
        if not (self.warm_dir and lead and [nb.cells[i].source for i in leading] == lead):
            return {}
        path = prefix_file(Path(self.warm_dir), info["assignment"], info["notebook"])
        if not path.exists():
            return {}
        prefix = Prefix.load(path)
        if prefix.sources != lead or (socket := zygote_socket(path)) is None:
            return {}
        self._prefix, self._zygote = prefix, socket
        return {index: position for position, index in enumerate(leading)}

    async def async_start_new_kernel(self, **kwargs):
        kwargs["cwd"] = self._workdir
        try:
            await super().async_start_new_kernel(**kwargs)
        except Exception as error:
            raise GraderTrouble(f"it could not start: {type(error).__name__}: {error}") from error
        self._kernel_uid = kernel_uid(self.km.provisioner.pid)

    async def async_start_new_kernel_client(self):
        try:
            return await super().async_start_new_kernel_client()
        except Exception as error:  # it died or never answered before any student code ran
            raise GraderTrouble(f"it never answered: {type(error).__name__}: {error}") from error

    # nbclient binds the sync versions to its own coroutines
    start_new_kernel = run_sync(async_start_new_kernel)
    start_new_kernel_client = run_sync(async_start_new_kernel_client)

    def create_kernel_manager(self):
        km = super().create_kernel_manager()
        km.max_message = self.max_message_mb * 2**20
        km.transport = "ipc"  # Unix sockets: the kernel has no network
        km.ip = os.path.join(self._private, "ipc")
        km.connection_file = os.path.join(self._private, "kernel.json")
        km.zygote = self._zygote or ""
        limits = Limits(
            memory_mb=self.memory_mb,
            cpu_seconds=self.total_timeout + 60,
            cpu_share=self.cpu_share,
        )
        km.policy = policy_for(
            self._course, Path(self._workdir), Path(self._private), limits, self.isolate, self._view
        ).to_json()
        km.view = str(self._view)
        return km

    def preprocess_cell(self, cell, resources, index):
        cell, resources = self._cell(cell, resources, index)
        if index == len(self.nb.cells) - 1:
            self._judge_probes()
        return cell, resources

    def _cell(self, cell, resources, index):
        if index in self._replay:
            position = self._replay[index]
            cell.outputs = [nbformat.from_dict(o) for o in self._prefix.outputs[position]]
            cell.execution_count = self._prefix.execution_counts[position]
            self._widgets_after_prefix(index)
            return cell, resources
        if cell.cell_type != "code":
            return cell, resources
        if not self._watching:  # the first cell this kernel runs
            self._watching = True
            self._silent(kernelcalls.watch_test_cells(sorted(self._tests)))
        test = is_test_cell(cell) and cell.source in self._tests
        self._in_test = test
        source = cell.source
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        visible, hidden = split_hidden(source)
        if test and hidden.strip() and grade_id in self._expected:
            self._probes.append((index, grade_id, hidden))
            cell.source = visible  # else (no reference records) the cell runs whole, as stock
        try:
            return self._execute(cell, resources, index)
        finally:
            cell.source = source

    def _silent(self, code: str) -> None:
        """Run the grader's own ``code`` in the kernel, outside the notebook's cells and history
        (no cell events fire, nothing is shown), before any student code has run there: a
        failure is the grader's trouble (`GraderTrouble`)."""
        msg_id = self.kc.execute(code, silent=True, store_history=False)
        content = (self.wait_for_reply(msg_id) or {}).get("content", {})
        if content.get("status") != "ok":
            raise GraderTrouble(
                f"it could not run the grader's code ({content.get('ename', 'no reply')})"
            )

    def _judge_probes(self) -> None:
        """After the last cell: run each test cell's probes outside the notebook's cells and
        history, judge their records against the reference's, and let that verdict alone score
        the cell (`_scored`)."""
        self._probing = True  # from here on, nothing the kernel says reaches the notebook
        reveal = self.reveal_after_due and past_due(self.resources)
        for index, grade_id, hidden in self._probes:
            cell = self.nb.cells[index]
            run = nbformat.v4.new_code_cell(kernelcalls.send_records(hidden, self._draw))
            # the records' message is read, never kept: only the cell's cap bounds it, so what
            # the notebook printed before cannot push it out
            self._output_bytes = 0
            try:
                self._execute(run, self.resources, index, store_history=False)
            finally:
                self.nb.cells[index] = cell  # nbclient puts the cell it ran in that place
            errors = [o for o in run.outputs if o.output_type == "error"]
            if errors:  # the answer stopped them: say why in the grader's words only
                timed_out = errors[0].get("ename") == "CellTimeoutError"
                why = "they ran past the time limit" if timed_out else "the answer stopped them"
                verdict = Verdict([f"the hidden tests did not finish: {why}"])
            else:
                verdict = judge(
                    read_records(run.outputs), self._expected[grade_id], reveal, asked_names(hidden)
                )
            cell.outputs = _scored(cell.outputs, verdict)

    def _execute(self, cell, resources, index, store_history=True):
        """Run one cell with what is left of the notebook's time as its limit."""
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise SubmissionTimeout(
                f"the notebook ran past its total time limit of {self.total_timeout} s"
            )
        configured = self.timeout
        self._cpu_limit = configured
        wall = configured * self.wall_factor if configured else remaining
        self.timeout = max(1, min(int(wall), int(remaining) + 1))
        self._cell_output_bytes = 0
        try:
            if store_history:
                return super().preprocess_cell(cell, resources, index)
            self.execute_cell(cell, index, store_history=False)
            return cell, resources
        finally:
            self.timeout, self._cpu_limit = configured, None

    async def async_execute_cell(self, cell, cell_index, execution_count=None, store_history=True):
        """nbclient's, with the cell's CPU time watched (`_watch_cpu`) while it runs."""
        self._interrupted = None
        watch = asyncio.ensure_future(self._watch_cpu()) if self._cpu_limit else None
        try:
            cell = await super().async_execute_cell(
                cell, cell_index, execution_count, store_history
            )
        finally:
            if watch is not None:
                watch.cancel()
        if self._interrupted:  # the student sees why, not a bare KeyboardInterrupt
            for output in cell.outputs:
                if output.output_type == "error" and output.ename == "KeyboardInterrupt":
                    output.ename, output.evalue = "CellTimeoutError", self._interrupted
                    output.traceback = [f"CellTimeoutError: {self._interrupted}"]
        return cell

    execute_cell = run_sync(async_execute_cell)

    def on_cell_executed(self, **kwargs):
        """nbgrader adds the reply's error to the cell when no output named it (a timeout, or
        output cut past the cap): its text is the kernel's, so it is cut to `MAX_ERROR_TEXT`
        first."""
        content = kwargs["execute_reply"].get("content", {})
        if content.get("status") == "error":
            content["ename"] = _bounded(content.get("ename"))
            content["evalue"] = _bounded(content.get("evalue"))
            lines = content.get("traceback")
            content["traceback"] = [_bounded(t) for t in lines[:20]] if type(lines) is list else []
        super().on_cell_executed(**kwargs)

    async def _async_handle_timeout(self, timeout, cell=None):
        """The wall-clock backstop: nbclient interrupts the cell; a kernel that does not answer
        within ``interrupt_grace`` after that is killed, never waited on cell after cell."""
        reply = await super()._async_handle_timeout(timeout, cell)
        if not await self._answers_within(self.interrupt_grace):
            self._stuck = (
                f"the cell ran past its {timeout} s wall-clock limit and went on after the "
                "interrupt, so its kernel was killed"
            )
            await ensure_async(self.km.shutdown_kernel(now=True))
            raise DeadKernelError("killed by the grader")
        return reply

    async def _answers_within(self, seconds: float) -> bool:
        """Whether the kernel answers a kernel_info request within ``seconds`` (a kernel still
        busy with an interrupted cell does not)."""
        msg_id = self.kc.kernel_info()
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                msg = await ensure_async(self.kc.shell_channel.get_msg(timeout=left))
            except queue.Empty:
                return False
            if msg["parent_header"].get("msg_id") == msg_id:
                return True
        return False

    async def _watch_cpu(self) -> None:
        """The per-cell limit counts the kernel's CPU time, so a loaded machine does not cut an
        honest cell short: past it the cell is interrupted (its error says why), and a cell that
        goes on after that has its kernel killed. nbclient's wall-clock timeout, ``wall_factor``
        times larger, stays as the backstop for a cell that waits without computing."""
        session = self.km.provisioner.pid  # the kernel leads its session (`sandbox.enter`)
        start = session_cpu_seconds(session)
        while session_cpu_seconds(session) - start <= self._cpu_limit:
            await asyncio.sleep(0.2)
        message = f"the cell used more than {self._cpu_limit} s of CPU time and was stopped"
        self._interrupted = message
        await ensure_async(self.km.interrupt_kernel())
        await asyncio.sleep(self.interrupt_grace)
        self._stuck = f"{message}; it went on after the interrupt, so its kernel was killed"
        await ensure_async(self.km.shutdown_kernel(now=True))

    def _counted(self, msg) -> str:
        """Count a message against the cell's and the notebook's caps: "keep", "cut" (the first
        one past a cap) or "drop" (those after it). Its binary buffers count too (nbclient keeps
        a widget's in the notebook)."""
        size = len(str(msg.get("content", ""))) + sum(map(len, msg.get("buffers") or ()))
        self._cell_output_bytes += size
        self._output_bytes += size
        over = max(
            self._cell_output_bytes - self.max_output_kb * 1024,
            self._output_bytes - self.max_notebook_output_kb * 1024,
        )
        return "keep" if over <= 0 else "cut" if over <= size else "drop"

    def output(self, outs, msg, display_id, cell_index):
        counted = self._counted(msg)
        if counted == "drop":
            return None
        if counted == "cut":
            outs.append(
                nbformat.v4.new_output(
                    "stream",
                    name="stderr",
                    text=f"\n[output cut by the grader: more than {self.max_output_kb} KB in "
                    f"a cell or {self.max_notebook_output_kb} KB in the notebook]\n",
                )
            )
            return None
        content = msg.get("content", {})
        if msg.get("msg_type") == "stream" and content.get("name") == "stderr" and self._in_test:
            # nbgrader scores a test cell with any stderr as 0: a warning an honest answer
            # prints (torch's UserWarnings) is shown, as stdout, and costs nothing.
            msg = {**msg, "content": {**content, "name": "stdout"}}
        return super().output(outs, msg, display_id, cell_index)

    def _update_display_id(self, display_id, msg):
        """An update of an earlier cell's output (``update_display_data``) counts against the
        caps like any output, and none is taken once the hidden tests run: what the kernel says
        then never reaches the notebook or the feedback."""
        if not self._probing and self._counted(msg) == "keep":
            super()._update_display_id(display_id, msg)

    def handle_comm_msg(self, outs, msg, cell_index):
        """nbclient's, which keeps every widget's state for the notebook's metadata: that state
        counts against the caps like output (a widget's value can be any size), and a malformed
        message (student code can send any) is left out, never a crash of the whole notebook.
        None is taken once the hidden tests run."""
        if self._probing or self._counted(msg) != "keep":
            return
        try:
            super().handle_comm_msg(outs, msg, cell_index)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as error:
            self.log.warning("ignored a malformed widget message (%s)", type(error).__name__)

    async def _async_check_alive(self) -> None:
        if not await ensure_async(self.km.is_alive()):
            self.log.error("Kernel died while waiting for execute reply.")
            raise DeadKernelError("Kernel died")


def _bounded(text: object) -> str:
    return str(text or "")[:MAX_ERROR_TEXT]


def _scored(outputs: list, verdict: Verdict) -> list:
    """A probed test cell's outputs, scored by ``verdict`` alone: the kernel's error or stderr
    becomes text marked not graded, its value (``execute_result``, which nbgrader would read as
    partial credit) is shown, not scored; the hidden tests' failure goes first (nbgrader scores
    the cell 0) and what they saw that carries no points goes last."""
    shown = []
    for output in outputs:
        if output.output_type == "error":
            error = short_error(output.ename, output.evalue)
            text = f"The visible test failed ({NOT_GRADED}): {error}\n"
            shown.append(nbformat.v4.new_output("stream", name="stdout", text=text))
        elif output.output_type == "stream" and output.name == "stderr":
            shown.append(nbformat.v4.new_output("stream", name="stdout", text=output.text))
        elif output.output_type == "execute_result":
            shown.append(
                nbformat.v4.new_output(
                    "display_data", data=output.data, metadata=output.get("metadata", {})
                )
            )
        else:
            shown.append(output)
    if verdict.teaching:
        shown.append(teaching_output(verdict))
    if verdict.problems:
        shown.insert(0, failure_output(verdict))
    return shown


def past_due(resources) -> bool:
    """Whether the due date (in the gradebook) of the assignment being graded has passed; False
    when it has none or the gradebook cannot tell."""
    from nbgrader.api import Gradebook

    info = (resources or {}).get("nbgrader", {})
    try:
        with Gradebook(info["db_url"]) as gb:
            due = gb.find_assignment(info["assignment"]).duedate
    except Exception:  # no gradebook or no such assignment: keep the answers back
        return False
    now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)  # nbgrader: naive UTC
    return due is not None and now > due
