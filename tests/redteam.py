"""Grade attack files (fixtures/attacks' format) in a scratch course, as a red team or a reviewer
would, and print what each earned and whether it leaked::

    .venv/bin/python tests/redteam.py fixtures/attacks/04_no_grad/*.py [--keep]
    .venv/bin/python tests/redteam.py --readme     # fixtures/attacks/README.md's table, anew

A bystander (the reference solution) is graded in the same batch and must keep every point. The
course is a copy (`course_testing.copy_course`) in a temporary folder, graded by `python -m
course grade` as an instructor runs it; ``--keep`` leaves it there to read the feedback pages.
``--readme`` grades nothing: it writes the README's table of attacks from the files' headers.
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from course.submission import build_submission, reference_answers, write_submission  # noqa: E402
from course_testing import (  # noqa: E402
    ATTACKS_README,
    all_attacks,
    cell_scores,
    copy_course,
    leaked_secrets,
    points,
    read_attack,
    readme_with_table,
    venv_env,
    write_attack,
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--keep", action="store_true", help="keep the scratch course")
    parser.add_argument("--readme", action="store_true", help="write the README's table")
    args = parser.parse_args()
    if args.readme:
        ATTACKS_README.write_text(readme_with_table(ATTACKS_README.read_text(), all_attacks()))
        print(f"wrote {ATTACKS_README}")
        return 0
    if not args.files:
        parser.error("name the attack files to grade (or --readme)")
    attacks = [read_attack(p.resolve()) for p in args.files]
    root = Path(tempfile.mkdtemp(prefix="redteam-")) / "course"
    course = copy_course(root, with_release=True)
    with (root / "nbgrader_config.py").open("a") as config:
        config.write("\nc.Execute.timeout = 15\nc.GradingExecute.total_timeout = 90\n")
    assignments = sorted({a.assignment for a in attacks})
    for assignment in assignments:
        refs = reference_answers(course, assignment)
        nb = build_submission(course, assignment, refs)
        write_submission(course, "bystander", assignment, nb)
    for attack in attacks:
        write_attack(course, attack.name, attack)
    result = subprocess.run(
        [sys.executable, "-m", "course", "grade", *assignments, "--workers", "2"],
        cwd=root,
        env=venv_env(),
        capture_output=True,
        text=True,
    )
    print(result.stdout.splitlines()[-1] if result.stdout else result.stderr[-2000:])
    with (root / "grades" / "grades.csv").open() as sheet:
        rows = {(r["assignment"], r["student_id"]): r for r in csv.DictReader(sheet)}
    harm = 0
    for attack in attacks:
        row = rows.get((attack.assignment, attack.name), {})
        try:
            scores = cell_scores(course, attack.assignment, attack.name)
        except Exception:
            scores = {}
        earned = {k: v for k, v in scores.items() if v}
        leaked = leaked_secrets(course, attack)
        harm += bool(earned or leaked)
        detail = row.get("detail", "")[:300]
        print(f"\n{attack.assignment}/{attack.name}: {row.get('status')} {detail}")
        print(f"  earned {earned or 'nothing'}")
        print(f"  leaked {leaked[:3]}" if leaked else "  leaked nothing")
    for assignment in assignments:
        got = sum(v or 0 for v in cell_scores(course, assignment, "bystander").values())
        harm += got != points(assignment)
        print(f"bystander {assignment}: {got}/{points(assignment)}")
    print(f"\ncourse: {root}" if args.keep else "")
    if not args.keep:
        subprocess.run(["rm", "-rf", str(root.parent)])
    return 1 if harm else 0


if __name__ == "__main__":
    sys.exit(main())
