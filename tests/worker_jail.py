"""Run a command as a grading worker runs in an ordinary pod: in a mount namespace of its own where
the given folders do not exist (an empty, read-only folder in their place), as an unprivileged
uid, with no capability, so that the grader's sandbox must make do without root.

    python tests/worker_jail.py --uid UID --home DIR [--hide PATH]... [--keep PATH]...
        [--no-user-namespaces] [--masked-proc] -- CMD...

Run as root: it makes the namespace, then becomes ``UID`` (with HOME and TMPDIR set to DIR, its
working folder) and execs CMD. ``--keep PATH``: the folder PATH lies in shows only the kept
entries (an image with the package and its environment, and no course). The Python
installation stays reachable for that uid even where it lies under a folder only root may enter
(pyenv under /root). ``--no-user-namespaces``: the command may not make a user namespace either
(a cluster whose nodes forbid them), so the grader's sandbox has nothing to work with.
``--masked-proc``: /proc has files masked, as a container runtime masks them (then no user
namespace may mount a /proc of its own)."""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
import tempfile
from pathlib import Path

CLONE_NEWNS, CLONE_NEWUSER = 0x20000, 0x10000000
MS_RDONLY, MS_BIND, MS_REC, MS_PRIVATE = 1, 4096, 16384, 1 << 18
libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{what}: {os.strerror(error)}")


def mount(source: str, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    kind = fstype.encode() if fstype else None
    _check(
        libc.mount(source.encode(), target.encode(), kind, ctypes.c_ulong(flags), data.encode()),
        f"mount {target}",
    )


def hide(path: Path) -> None:
    """Put an empty read-only folder (or file) in the place of ``path``."""
    if path.is_dir():
        mount("tmpfs", str(path), "tmpfs", MS_RDONLY, "size=4k,mode=755")
    elif path.exists():
        mount("/dev/null", str(path), None, MS_BIND)


def show_only(folder: Path, trees: list[Path], home: Path) -> None:
    """Replace ``folder`` by an open, empty one that holds only ``trees`` (paths inside it): each
    is bound aside in ``home``, a tmpfs covers the folder, and each is bound back in place."""
    stashes = []
    for tree in trees:
        stash = Path(tempfile.mkdtemp(prefix=".stash", dir=home))
        mount(str(tree), str(stash), None, MS_BIND | MS_REC)
        stashes.append(stash)
    mount("tmpfs", str(folder), "tmpfs", 0, "size=64k,mode=755")
    for tree, stash in zip(trees, stashes, strict=True):
        tree.mkdir(parents=True)
        mount(str(stash), str(tree), None, MS_BIND | MS_REC)


def keep_only(kept: list[Path], home: Path) -> None:
    """Show, in each folder that holds a ``kept`` path, nothing but the kept paths."""
    folders: dict[Path, list[Path]] = {}
    for path in kept:
        folders.setdefault(path.parent, []).append(path)
    for folder, paths in folders.items():
        show_only(folder, paths, home)


def reachable(tree: Path, home: Path) -> None:
    """Make ``tree`` reachable for any uid: the topmost folder above it that others may not
    enter is replaced by an open one holding only that tree."""
    blocked = [p for p in reversed(tree.parents) if p != Path("/") and not os.stat(p).st_mode & 1]
    if blocked:
        show_only(blocked[0], [tree], home)


def no_user_namespaces() -> None:
    """Move into a user namespace that maps uids and gids 0-65535 to themselves and allows no
    user namespace below it. A helper forked first (still in the machine's namespace, as root)
    writes the maps, which this process may not write for itself."""
    ready, mapped = os.pipe(), os.pipe()
    helper = os.fork()
    if helper == 0:
        os.read(ready[0], 1)
        for name in ("uid_map", "gid_map"):
            Path(f"/proc/{os.getppid()}/{name}").write_text("0 0 65536\n")
        os.write(mapped[1], b"x")
        os._exit(0)
    _check(libc.unshare(CLONE_NEWUSER), "unshare")
    os.write(ready[1], b"x")
    os.read(mapped[0], 1)
    os.waitpid(helper, 0)
    Path("/proc/sys/user/max_user_namespaces").write_text("0\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--uid", type=int, required=True)
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--hide", type=Path, action="append", default=[])
    parser.add_argument("--keep", type=Path, action="append", default=[])
    parser.add_argument("--no-user-namespaces", action="store_true")
    parser.add_argument("--masked-proc", action="store_true")
    parser.add_argument("command", nargs="+")
    args = parser.parse_args()
    _check(libc.unshare(CLONE_NEWNS), "unshare")
    mount("none", "/", None, MS_REC | MS_PRIVATE)
    interpreter = Path(os.path.realpath(sys.executable)).parent.parent
    reachable(interpreter, args.home)
    for path in args.hide:
        hide(path)
    keep_only(args.keep, args.home)
    if args.masked_proc:
        mount("/dev/null", "/proc/keys", None, MS_BIND)  # one of those Docker masks
    os.chown(args.home, args.uid, args.uid)
    if args.no_user_namespaces:
        no_user_namespaces()
    os.setgroups([])
    os.setgid(args.uid)
    os.setuid(args.uid)  # and with it every capability
    os.environ.update(HOME=str(args.home), TMPDIR=str(args.home))
    os.chdir(args.home)
    os.execvp(args.command[0], args.command)


if __name__ == "__main__":
    main()
