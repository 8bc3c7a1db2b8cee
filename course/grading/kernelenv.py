"""What a process the grader starts to run course code (a kernel, its sandbox launcher, a zygote)
gets from the grader: an environment built from an allow-list, and the grader's own `course`
package by an explicit path.

Runs in: the grader and its workers, for the processes they start.

The kernel must import exactly the package the grader runs. Which one an interpreter would find
by itself depends on the layout: in a copied course folder `python -m course` imports the copy's
package (the working folder comes first on ``sys.path``) while the installed one (an editable
install) is the original folder's; on JupyterHub several course folders share one environment.
So every such process gets ``PYTHONPATH`` set to a *package view*: a folder that holds only a link
named ``course`` to the grader's package, mounted read-only in the sandbox. Nothing else of the
grader's environment reaches student code but the variables below: a ``PYTHONPATH`` of the
instructor's, tokens or passwords never do.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import course

# What Python, torch and Jupyter need to run as they do for the grader, and nothing secret.
ALLOWED = frozenset(
    {
        "PATH",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TERM",
        "LD_LIBRARY_PATH",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "OPENBLAS_CORETYPE",
        "OPENBLAS_L2_SIZE",
        "MPLBACKEND",
        "NBGRADER_EXECUTION",
        "PYDEVD_DISABLE_FILE_VALIDATION",
    }
)
ALLOWED_PREFIXES = ("LC_", "JPY_")  # the locale; jupyter_client's own (JPY_PARENT_PID, ...)


def package_dir() -> Path:
    """The folder of the `course` package this process runs."""
    return Path(course.__file__).resolve().parent


def package_view(folder: Path) -> Path:
    """``folder``/package, holding only a link named ``course`` to `package_dir()` (made once,
    atomically: jobs and zygotes may ask at the same time)."""
    view = Path(folder) / "package"
    link = view / "course"
    if not (link.is_symlink() and link.resolve() == package_dir()):
        view.mkdir(parents=True, exist_ok=True)
        partial = view / f".course.{os.getpid()}"
        partial.unlink(missing_ok=True)
        partial.symlink_to(package_dir())
        os.replace(partial, link)
    return view


# One thread for every kernel that grades or makes the reference's records: a sum over several
# threads rounds in another order, so the same answer would differ in its last bits between a
# kernel forked warm (one thread), one started cold and the reference's, and a value that is zero
# up to rounding would not match.
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def kernel_env(base: Mapping[str, str], view: Path) -> dict[str, str]:
    """``base`` (an environment) reduced to the allow-list, importing `course` from ``view``,
    with torch on one thread (`ONE_THREAD`)."""
    env = {k: v for k, v in base.items() if k in ALLOWED or k.startswith(ALLOWED_PREFIXES)}
    env["PYTHONPATH"] = str(view)
    env["PYTHONSAFEPATH"] = "1"  # never the working folder first (`python -m` would put it there)
    return {**env, **ONE_THREAD}
