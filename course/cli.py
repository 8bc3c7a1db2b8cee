"""`python -m course`: the instructor's commands on top of nbgrader."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from . import demo, release, report
from .grading import batch, sandbox
from .grading.coursedir import Course, CourseError
from .progress import Progress


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m course", description=__doc__)
    parser.add_argument("--course", default=".", help="course directory (default: current)")
    commands = parser.add_subparsers(dest="command", required=True)

    rel = commands.add_parser("release", help="regenerate release/ from source/")
    rel.add_argument("assignments", nargs="*", help="assignment ids (default: all)")

    grd = commands.add_parser("grade", help="autograde submitted/, write feedback and grades.csv")
    grd.add_argument("assignments", nargs="+", help="assignment ids")
    grd.add_argument(
        "--student",
        action="append",
        dest="students",
        help="grade only this student (repeatable; default: the whole roster)",
    )
    grd.add_argument("--csv", type=Path, help="where to write the grades (default: grades.csv)")
    grd.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        help="submissions graded at once (default: the number of CPUs)",
    )

    dem = commands.add_parser(
        "demo", help="grade a fictional class in a scratch copy of the course"
    )
    dem.add_argument("--scratch", type=Path, help="scratch directory (default: .demo/)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        course = Course.at(args.course)
        if args.command == "release":
            for assignment in release.release(course, args.assignments):
                print(f"released {assignment} -> {course.root / 'release' / assignment}")
        elif args.command == "grade":
            if reason := sandbox.unavailable():
                print(
                    f"warning: kernels run with your rights, not sandboxed ({reason}); "
                    "grade in a disposable container or VM",
                    file=sys.stderr,
                )
            bar: list[Progress] = []
            outcomes = batch.grade(
                course,
                args.assignments,
                args.students,
                on_start=lambda total: bar.append(Progress(total)),
                on_outcome=lambda o: bar[0].update(o.status == batch.FAILED),
                workers=args.workers,
            )
            if bar:
                bar[0].close()
            report.publish(course, outcomes, args.csv or course.root / "grades.csv")
            print(batch.summary(outcomes))
            return batch.exit_status(outcomes)
        elif args.command == "demo":
            demo.run_demo(course, args.scratch or course.root / ".demo")
    except CourseError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0
