"""`python -m course`: the instructor's commands on top of nbgrader."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from . import demo, lab, release, report, returns, studentcopy
from .grading import batch, sandbox
from .grading.coursedir import Course, CourseError
from .progress import Progress

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

    commands.add_parser("lab", help="JupyterLab on the course (formgrader in the Nbgrader menu)")

    dem = commands.add_parser(
        "demo", help="grade a fictional class in a scratch copy of the course"
    )
    dem.add_argument("--scratch", type=Path, help="scratch directory (default: .demo/)")
    return parser


def _grade(course: Course, args) -> int:
    if reason := sandbox.unavailable():
        print(
            f"warning: kernels run with your rights, not sandboxed ({reason}); "
            "grade in a disposable container or VM",
            file=sys.stderr,
        )
    students = course.check_students(args.students) if args.students else None
    bar: list[Progress] = []
    outcomes = batch.grade(
        course,
        args.assignments,
        students,
        on_start=lambda total: bar.append(Progress(total)),
        on_outcome=lambda o: bar[0].update(o.status == batch.FAILED),
        workers=args.workers,
    )
    if bar:
        bar[0].close()
    report.publish(course, outcomes, args.out or course.root / GRADES_DIR)
    print(batch.summary(outcomes))
    return batch.exit_status(outcomes)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        course = Course.at(args.course)
        if args.command == "release":
            for assignment in release.release(course, args.assignments):
                print(f"released {assignment} -> {course.root / 'release' / assignment}")
        elif args.command == "grade":
            return _grade(course, args)
        elif args.command == "feedback":
            students = course.check_students(args.students) if args.students else None
            released, by_hand = returns.return_feedback(course, args.assignments, students)
            print(returns.summary(course, released, by_hand))
            report.publish(course, [], args.out or course.root / GRADES_DIR)
        elif args.command == "export":
            report.publish(course, [], args.out or course.root / GRADES_DIR)
        elif args.command == "student-copy":
            copy = studentcopy.build_student_copy(course, args.dest, args.binder)
            print(f"student copy: {copy}")
        elif args.command == "lab":
            lab.run_lab(course)
        elif args.command == "demo":
            demo.run_demo(course, args.scratch or course.root / ".demo")
    except CourseError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0
