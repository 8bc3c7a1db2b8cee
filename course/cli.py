"""`python -m course`: the instructor's commands on top of nbgrader.

Runs in: the grader (the instructor's `python -m course` process).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from pathlib import Path

from .pipe import stdout_reader_may_go

# Heavy modules (torch, nbgrader, nbformat's validator) are imported by the commands that use
# them: --help and a mistyped command answer at once.

GRADES_DIR = "grades"  # our files: grades.csv, canvas.csv, report.html (nbgrader's export: not)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m course", description=__doc__)
    parser.add_argument("--course", default=".", help="course directory (default: current)")
    commands = parser.add_subparsers(dest="command", required=True)

    rel = commands.add_parser("release", help="regenerate release/ from source/")
    rel.add_argument("assignments", nargs="*", help="assignment ids (default: all)")

    def students_and_out(command: argparse.ArgumentParser) -> None:
        command.add_argument(
            "--student",
            action="append",
            dest="students",
            help="only this student (repeatable; default: the whole roster)",
        )
        command.add_argument(
            "--out", type=Path, help=f"folder for the grade files (default: {GRADES_DIR}/)"
        )

    grd = commands.add_parser("grade", help="autograde submitted/, write feedback and grades")
    grd.add_argument("assignments", nargs="+", help="assignment ids")
    students_and_out(grd)
    grd.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        help="submissions graded at once (default: the number of CPUs)",
    )
    grd.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="grade on a dask cluster: its scheduler's address (tcp://HOST:8786), or its "
        "scheduler file (see docs/scaling.md)",
    )
    grd.add_argument(
        "--allow-unsandboxed",
        action="store_true",
        help="grade even where kernels get no sandbox (no namespaces): student code could "
        "then read the course and the hidden tests' expected values",
    )

    fbk = commands.add_parser(
        "feedback", help="after manual grading: regenerate and release feedback, update grades"
    )
    fbk.add_argument("assignments", nargs="+", help="assignment ids")
    students_and_out(fbk)

    exp = commands.add_parser("export", help="rewrite the grade files from the gradebook")
    exp.add_argument(
        "--out", type=Path, help=f"folder for the grade files (default: {GRADES_DIR}/)"
    )

    cpy = commands.add_parser(
        "student-copy", help="the repository students clone or open on Binder"
    )
    cpy.add_argument("dest", type=Path, help="a new folder")
    cpy.add_argument(
        "--binder", metavar="OWNER/REPO", help="the GitHub repository of the copy: a Binder badge"
    )

    commands.add_parser(
        "lab",
        help="JupyterLab on the course (formgrader in the Nbgrader menu)",
        usage="python -m course lab [JupyterLab's options, e.g. --port 8899 --no-browser]",
    )

    commands.add_parser("backup", help="keep a copy of gradebook.db in .course/backups/ now")
    rst = commands.add_parser(
        "restore", help="put back a copy of gradebook.db from .course/backups/ (default: newest)"
    )
    rst.add_argument("name", nargs="?", help="which copy (see --list)")
    rst.add_argument("--list", action="store_true", help="list the copies, newest first")

    dem = commands.add_parser(
        "demo", help="grade a fictional class in a scratch copy of the course"
    )
    dem.add_argument("--scratch", type=Path, help="scratch directory (default: .demo/)")
    return parser


def _asked(args) -> dict:
    """The assignments and students a command was asked for: the rows its table shows."""
    return {"assignments": args.assignments, "students": args.students}


def _dask_client(address: str):
    """A client of the dask scheduler at ``address`` (or named in the scheduler file there)."""
    from distributed import Client

    from .grading.coursedir import CourseError

    where = {"scheduler_file": address} if Path(address).is_file() else {"address": address}
    try:
        return Client(**where, timeout="30s")
    except (OSError, ValueError) as error:  # unreachable (a timeout is an OSError), or no address
        raise CourseError(f"no dask scheduler answers at {address} ({error})") from None


def _grade(course, args) -> int:
    from .grading import batch
    from .progress import Progress
    from .report import publish

    bar = Progress()
    with contextlib.ExitStack() as stack:
        client = stack.enter_context(_dask_client(args.scheduler)) if args.scheduler else None
        try:
            outcomes = batch.grade(
                course,
                args.assignments,
                args.students,  # checked before the backup (`_check_request`)
                workers=args.workers,
                client=client,
                allow_unsandboxed=args.allow_unsandboxed,
                on_notice=lambda line: print(line, file=sys.stderr),
                **bar.callbacks(),
            )
        except batch.Interrupted as stopped:
            bar.close()
            print(stopped, file=sys.stderr)
            return EXIT_INTERRUPTED
    bar.close()
    publish(course, outcomes, args.out or course.root / GRADES_DIR, **_asked(args))
    print(batch.summary(outcomes))
    return batch.exit_status(outcomes)


# Exit statuses beyond `course.grading.batch`'s 0, 1 and 3: a request that could not be taken,
# and a run stopped by Ctrl-C (the shell's own convention).
EXIT_REQUEST, EXIT_TROUBLE, EXIT_INTERRUPTED = 2, 3, 130
# Commands that write the gradebook: one at a time per course, after a check and a backup.
WRITES_GRADEBOOK = {"release", "grade", "feedback", "export", "backup", "restore"}


def _restore(course, args) -> int:
    from .grading import gradebook

    if args.list:
        kept = gradebook.backups(course)
        for path in kept:
            print(path.name)
        if not kept:
            print(f"no copies in {gradebook.backups_dir(course)}")
        return 0
    restored, replaced = gradebook.restore(course, args.name)
    print(f"restored {course.gradebook} from {restored}")
    if replaced:
        print(f"the gradebook it replaced is kept as {replaced}")
    return 0


def _check_request(course, args) -> None:
    """Refuse an unknown assignment or student before anything is imported or written."""
    if "assignments" in args:
        course.check_assignments(args.assignments)
    if getattr(args, "students", None):
        course.check_students(args.students)


def _run(course, args) -> int:
    if args.command == "release":
        from .release import release

        for assignment in release(course, args.assignments):
            print(f"released {assignment} -> {course.root / 'release' / assignment}")
    elif args.command == "grade":
        return _grade(course, args)
    elif args.command == "feedback":
        from . import returns
        from .report import publish

        released, by_hand = returns.return_feedback(course, args.assignments, args.students)
        print(returns.summary(course, released, by_hand))
        publish(course, [], args.out or course.root / GRADES_DIR, **_asked(args))
    elif args.command == "export":
        from .report import publish

        publish(course, [], args.out or course.root / GRADES_DIR)
    elif args.command == "backup":
        from .grading import gradebook

        if not course.gradebook.exists():
            print(f"nothing to back up: {course.gradebook} does not exist yet")
        elif kept := gradebook.backup(course, "backup"):
            print(f"kept {kept}")
        else:
            print(f"the newest copy already holds the same: {gradebook.backups(course)[0]}")
    elif args.command == "restore":
        return _restore(course, args)
    elif args.command == "student-copy":
        from .studentcopy import build_student_copy

        print(f"student copy: {build_student_copy(course, args.dest, args.binder)}")
    elif args.command == "lab":
        from .lab import run_lab

        run_lab(course, args.options)
    elif args.command == "demo":
        from .demo import run_demo

        run_demo(course, args.scratch or course.root / ".demo")
    return 0


def main(argv: list[str] | None = None) -> int:
    with stdout_reader_may_go():  # `python -m course export | head` does all its work
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    parser = _parser()
    args, options = parser.parse_known_args(argv)
    if options and args.command != "lab":  # only lab passes options on (to JupyterLab)
        parser.error(f"unrecognized arguments: {' '.join(options)}")
    args.options = options
    from .grading.coursedir import Course, CourseError, CourseTrouble
    from .grading.resume import STOP_SIGNALS

    for signum in STOP_SIGNALS:  # stop as after Ctrl-C: nothing of the run is left running
        signal.signal(signum, signal.default_int_handler)

    try:
        course = Course.at(args.course)
        if args.command not in WRITES_GRADEBOOK or getattr(args, "list", False):
            return _run(course, args)  # `restore --list` only reads
        from .grading import gradebook

        with gradebook.exclusive(course, args.command):
            if args.command != "restore":  # restore is how a damaged one is mended
                gradebook.check(course)
                _check_request(course, args)
                if args.command != "backup":
                    gradebook.backup(course, args.command)
            return _run(course, args)
    except CourseTrouble as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_TROUBLE
    except CourseError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_REQUEST
    except KeyboardInterrupt:
        print("interrupted before it finished; run the same command again", file=sys.stderr)
        return EXIT_INTERRUPTED
