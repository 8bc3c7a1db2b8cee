"""The Execute preprocessor used for grading: nbgrader's, with a sandboxed (and, where a zygote is
ready, warm) kernel, a total time limit, an output cap and kernel death noticed at once."""

from __future__ import annotations

import asyncio
import copy
import datetime
import os
import queue
import shutil
import socket
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient.exceptions import DeadKernelError
from nbclient.util import ensure_async, run_sync
from nbgrader.preprocessors import Execute
from traitlets import Bool, Float, Integer, Unicode

from . import shell_wakeup
from .codescan import scan_notebook, trusted_cells
from .kernelenv import package_view
from .probes import (
    TAMPERED,
    asked_names,
    cache_dir,
    collect_code,
    expected_records,
    failure_output,
    judge,
    read_records,
    split_hidden,
    tampered,
    tripwire_answer,
)
from .repair import source_notebook
from .sandbox import Limits, kernel_uid, kill_uid, policy_for, session_cpu_seconds
from .warm import (
    Prefix,
    SandboxedKernelManager,
    leading_code,
    prefix_file,
    prefix_sources,
    zygote_socket,
)

GUARD = "__import__('course.grading.guard').grading.guard"
GUARD_TIMEOUT = 60.0  # seconds (wall clock) for the tripwire's answer
WITHHELD = "GradingWithheld"


class SubmissionTimeout(Exception):
    """The notebook ran past its total time limit."""


class CellTimeLimit(Exception):
    """A cell ran past its CPU-time limit and went on after the interrupt: the kernel was killed."""


class KernelStartFailed(Exception):
    """The grading kernel could not start, or could not import what grading needs (the tripwire,
    the probes): the grader's trouble, found before any student code ran."""


class GradingExecute(Execute):
    """nbgrader's Execute, with:

    - hidden tests judged outside the kernel (`course.grading.probes`): a test cell runs only
      its visible part in place; once the last cell has run, each hidden block's probes run
      outside the notebook's cells and history, and a cell whose records differ from the
      reference's gets a `HiddenTestFailed` error first among its outputs (nbgrader scores 0);
    - each kernel in a sandbox (`course.grading.sandbox`), working in an empty folder of its
      own: an allow-list of paths, its own PID, network and IPC namespaces and uid, limits on
      memory, CPU, processes and file size;
    - a warm start where a zygote serves this notebook (`course.grading.warm`) and the
      notebook's leading code cells are the locked ones it ran: those cells are not run again,
      their recorded outputs are copied in;
    - time limits that hold on a loaded machine: a cell's limit counts the kernel's CPU time
      (`_watch_cpu`), nbclient's wall-clock timeout is a larger backstop, a kernel that ignores
      the interrupt is killed, and the notebook has a total (wall-clock) limit;
    - at most ``max_output_kb`` of output kept per cell, so a flood cannot exhaust the grader;
    - a kernel that exits (``os._exit``, a segfault, the memory limit) reported as dead within a
      second, not as a late cell timeout. nbclient asks the kernel *client* whether the kernel
      lives, which without a heartbeat always says yes; the kernel *manager* knows;
    - a kernel that could not start reported as the grader's trouble (`KernelStartFailed`), so
      the job runs again (`course.grading.runner`);
    - tampering withheld: if the static scan (`course.grading.codescan`) finds student code
      using a handle on the interpreter or the OS, or the tripwire (`course.grading.guard`)
      finds what the tests rely on changed after a test cell, that test cell and every later
      one get an error first among their outputs, so nbgrader scores them 0 and the student
      sees why. The reasons go to the notebook's metadata (``course.withheld``) for the
      grader's report; the instructor can review and override;
    - a warning on stderr in a test cell kept as stdout: nbgrader scores any stderr as 0.
    """

    warm_dir = Unicode("", help="folder with recorded prefixes and zygote sockets").tag(config=True)
    course_root = Unicode("", help="the course folder (default: the cwd)").tag(config=True)
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
    max_notebook_output_kb = Integer(8192, help="output kept per notebook").tag(config=True)
    memory_mb = Integer(Limits.memory_mb, help="kernel's private memory").tag(config=True)
    isolate = Bool(True, help="namespaces and own uid, where the machine allows").tag(config=True)
    reveal_after_due = Bool(
        True,
        help="a failed quick check names the right answer once the assignment's due date has "
        "passed (before it, classmates may still hand in)",
    ).tag(config=True)
    static_scan = Bool(
        True, help="withhold the tests of code that uses interpreter or OS handles"
    ).tag(config=True)

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("kernel_manager_class", SandboxedKernelManager)
        super().__init__(*args, **kwargs)
        # A reply that lands while the client sends (a student's Output widget) wakes it: a
        # missed one waited out the rest of the notebook's time limit (issue 38).
        shell_wakeup.install()

    def preprocess(self, nb, resources=None, km=None):
        self._trusted, findings, lead = self._scan(nb, resources)
        self._expected = self._expected_records(resources)
        self._probes: list[tuple[int, str, str]] = []  # (cell index, grade id, hidden code)
        self._in_test = False
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
        self._withheld = [str(f) for f in findings]
        self._guarding = False
        self._guard_listener = self._guard_channel = None
        self._kernel_uid = None
        self._cpu_limit = self._stuck = None
        try:
            nb, resources = super().preprocess(nb, resources, km)
        except DeadKernelError:
            if self._stuck:  # we killed it: the cell would not stop
                raise CellTimeLimit(self._stuck) from None
            raise
        finally:
            for end in (self._guard_channel, self._guard_listener):
                if end is not None:
                    end.close()
            if self._kernel_uid is not None:  # what the kernel left running dies with it
                kill_uid(self._kernel_uid)
            shutil.rmtree(self._private, ignore_errors=True)
            shutil.rmtree(self._private + "-view", ignore_errors=True)
        nb.metadata["course"] = {"withheld": self._withheld}  # replaces anything submitted
        return nb, resources

    def _scan(self, nb, resources) -> tuple[set[str], list, list[str]]:
        """The assignment's trusted cell sources, what the static scan finds in the rest, and
        the source's leading locked cells (`course.grading.warm.prefix_sources`)."""
        source = source_notebook(resources or {})
        if not source.is_file():
            self.log.warning("no source notebook at %s: student code is not scanned", source)
            return set(), [], []
        original = nbformat.read(source, as_version=4)
        trusted = trusted_cells(original)
        findings = scan_notebook(nb, trusted) if self.static_scan else []
        return trusted, findings, prefix_sources(original)

    def _expected_records(self, resources) -> dict[str, list[dict]]:
        """The reference's probe records for this notebook (`course.grading.probes`), computed
        once per source version and kept in the course's ``.course/expected`` folder."""
        source = source_notebook(resources or {})
        if not source.is_file():
            return {}
        assignment = (resources or {}).get("nbgrader", {}).get("assignment", "")
        return expected_records(
            source, cache_dir(Path(self.course_root or os.getcwd()), assignment)
        )

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

    async def _guard_start(self) -> str:
        """Start the tripwire (`course.grading.guard.start`) before any student code runs; it
        answers on a Unix socket of the grader's, never through the notebook's namespace."""
        path = os.path.join(self._private, "guard.sock")
        self._guard_listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._guard_listener.bind(path)
        os.chmod(path, 0o666)  # the kernel's own uid connects
        self._guard_listener.listen(1)
        self._guard_listener.settimeout(GUARD_TIMEOUT)
        msg_id = self.kc.execute(f"{GUARD}.start({path!r})", silent=True, store_history=False)
        reply = await self.async_wait_for_reply(msg_id)
        if (reply or {}).get("content", {}).get("status") != "ok":
            content = (reply or {}).get("content", {})
            return f"the tripwire could not start ({content.get('ename', 'no reply')})"
        try:
            channel, _ = self._guard_listener.accept()
        except OSError:
            return "the tripwire did not connect"
        channel.settimeout(GUARD_TIMEOUT)
        self._guard_channel = channel.makefile("rwb", buffering=0)
        return self._guard_answer()

    def _guard_answer(self) -> str:
        try:
            line = self._guard_channel.readline(64 * 1024)
        except OSError:
            line = b""
        return line.decode(errors="replace").strip() or "the tripwire did not answer"

    def _guard_ask(self, request: bytes) -> str:
        """The tripwire's answer once student code has run: what the feedback may repeat of it."""
        try:
            self._guard_channel.write(request + b"\n")
        except OSError:
            return "the tripwire did not answer"
        return tripwire_answer(self._guard_answer())

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
            raise KernelStartFailed(f"{type(error).__name__}: {error}") from error
        self._kernel_uid = kernel_uid(self.km.provisioner.pid)

    async def async_start_new_kernel_client(self):
        try:
            return await super().async_start_new_kernel_client()
        except Exception as error:  # it died or never answered before any student code ran
            raise KernelStartFailed(f"{type(error).__name__}: {error}") from error

    # nbclient binds the sync versions to its own coroutines
    start_new_kernel = run_sync(async_start_new_kernel)
    start_new_kernel_client = run_sync(async_start_new_kernel_client)

    def create_kernel_manager(self):
        km = super().create_kernel_manager()
        km.transport = "ipc"  # Unix sockets: the kernel has no network
        km.ip = os.path.join(self._private, "ipc")
        km.connection_file = os.path.join(self._private, "kernel.json")
        km.zygote = self._zygote or ""
        km.policy = policy_for(
            Path(self.course_root or os.getcwd()),
            Path(self._workdir),
            Path(self._private),
            Limits(memory_mb=self.memory_mb, cpu_seconds=self.total_timeout + 60),
            self.isolate,
            self._view,
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
        test = cell.metadata.get("nbgrader", {}).get("grade") and cell.source in self._trusted
        if test and self._withheld:
            cell.outputs = [_withheld_output(self._withheld)]
            cell.execution_count = None
            return cell, resources
        return self._run(cell, resources, index, test)

    def _run(self, cell, resources, index, test: bool):
        """Run a cell; of a test cell only its visible part: its hidden tests are probes, run
        once the whole notebook has (`_judge_probes`)."""
        if not self._guarding and cell.source not in self._trusted:
            self._guarding = True  # the first cell a student could have written
            if (answer := run_sync(self._guard_start)()) != "ok":
                # Only instructor code has run: the kernel lacks what grading needs.
                raise KernelStartFailed(answer)
        self._in_test = bool(test)
        source = cell.source
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        visible, hidden = split_hidden(source)
        if test and hidden.strip() and grade_id in self._expected:
            self._probes.append((index, grade_id, hidden))
            cell.source = visible  # else (no reference records) the cell runs whole, as stock
        lent = test and self._guarding and self._guard_ask(b"lend") == "ok"
        try:
            cell, resources = self._execute(cell, resources, index)
        finally:
            cell.source = source
        if test and self._guarding and not self._withheld:
            if (answer := self._guard_ask(b"check")) != "ok":
                self._withheld.append(f"after test cell {index + 1}: {answer}")
        if lent:
            self._guard_ask(b"give back")
        if test and self._withheld:  # an execute_result before the finding earns nothing
            cell.outputs.insert(0, _withheld_output(self._withheld))
        return cell, resources

    def _judge_probes(self) -> None:
        """After the last cell: run each test cell's probes outside the notebook's cells and
        history, and fail the cell (its first output, so nbgrader scores 0) when the records
        differ from the reference's. A cell that already failed or was withheld is left as is."""
        self._probing = True  # from here on, nothing the kernel says reaches the notebook
        reveal = self.reveal_after_due and past_due(self.resources)
        if not self._guard_holds("after the last cell"):  # a cell after the tests changed them
            return self._withhold_probed()
        named: set[str] = set()
        for index, grade_id, hidden in self._probes:
            cell = self.nb.cells[index]
            if any(o.output_type == "error" for o in cell.outputs):
                continue
            run = nbformat.v4.new_code_cell(collect_code(hidden))
            try:
                self._execute(run, self.resources, index, store_history=False)
            finally:
                self.nb.cells[index] = cell  # nbclient puts the cell it ran in that place
            errors = [o for o in run.outputs if o.output_type == "error"]
            if errors:  # the answer stopped them: say why in the grader's words only
                timed_out = errors[0].get("ename") == "CellTimeoutError"
                problems = [
                    "the hidden tests did not finish: "
                    + ("they ran past the time limit" if timed_out else "the answer stopped them")
                ]
            else:
                records = read_records(run.outputs)
                problems = judge(records, self._expected[grade_id], reveal, asked_names(hidden))
                if changed := tampered(records):
                    new = [name for name in changed if name not in named][: 10 - len(named)]
                    named.update(new)  # at most ten names a notebook, each once
                    self._withheld.append(
                        f"the hidden tests of {grade_id}: {TAMPERED}"
                        + (": " + ", ".join(new) if new else "")
                    )
            if problems:
                cell.outputs.insert(0, failure_output(problems))
        if not self._guard_holds("while the hidden tests ran"):
            self._withhold_probed()

    def _guard_holds(self, when: str) -> bool:
        """Ask the tripwire once more (between test cells it is asked after each): a finding is
        noted, and the probed cells earn nothing."""
        if not self._guarding:
            return True
        # As between test cells: the lesson's helpers bound while it looks (a student's own
        # variable named `probe` is the student's business).
        lent = self._guard_ask(b"lend") == "ok"
        answer = self._guard_ask(b"check")
        if lent:
            self._guard_ask(b"give back")
        if answer == "ok":
            return True
        self._withheld.append(f"{when}: {answer}")
        return False

    def _withhold_probed(self) -> None:
        for index, _, _ in self._probes:
            outputs = self.nb.cells[index].outputs
            if not any(o.output_type == "error" for o in outputs):
                outputs.insert(0, _withheld_output(self._withheld))

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
        """Count an output message against the cell's and the notebook's caps: "keep", "cut"
        (the first one past a cap) or "drop" (those after it)."""
        size = len(str(msg.get("content", "")))
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
        """nbclient's, which takes a widget message as well-formed: one that is not (student
        code can send any) is left out, never a crash of the whole notebook. None is taken once
        the hidden tests run (widget state is kept in the notebook)."""
        if self._probing:
            return
        try:
            super().handle_comm_msg(outs, msg, cell_index)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as error:
            self.log.warning(
                "ignored a malformed widget message (%s: %s)", type(error).__name__, error
            )

    async def _async_check_alive(self) -> None:
        if not await ensure_async(self.km.is_alive()):
            self.log.error("Kernel died while waiting for execute reply.")
            raise DeadKernelError("Kernel died")


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


def _withheld_output(reasons: list[str]) -> nbformat.NotebookNode:
    """The error a withheld test cell shows (and nbgrader scores as 0)."""
    message = (
        f"this test was not run: {'; '.join(reasons)}. Graded code may not use the "
        "interpreter's or the operating system's own handles, or change what the tests rely on "
        "(the course's grading policy), so your instructor will review this notebook by hand."
    )
    return nbformat.v4.new_output(
        "error", ename=WITHHELD, evalue=message, traceback=[f"{WITHHELD}: {message}"]
    )
