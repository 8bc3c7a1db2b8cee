"""What of a student's records a feedback page may quote: short, plain and bounded.

Runs in: the grader (or the worker that judges a submission).

Every message about the hidden tests is written by the grader from the reference's records; what
the student's kernel sent is data the student controls, and any text of it could carry the hidden
tests' source, which runs in that kernel. So a value from it is quoted only as `short` allows: a
plain string of a few characters (a name, a dtype, an answer like "b"), a number of bounded
precision, a bool, None or a shape; anything else is named by its kind.
"""

from __future__ import annotations

import builtins
import json
import math
import re

import torch

PLAIN = re.compile(r"[\w .,:()\[\]+-]+", re.ASCII)  # ASCII: no dense encoding in a name
PLAIN_LIMIT = 20  # characters: every quoted one is one the answer chose
MAX_ELEMENTS = 2**33  # more than any tensor a grading kernel can hold (8 GiB of bools)
TORCH_DTYPES = {str(v) for v in vars(torch).values() if isinstance(v, torch.dtype)}
# Names of errors to show (torch raises these too); a class the answer made is "an exception".
BUILTIN_ERRORS = {
    n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)
}


def plain(text: object, default: str = "something else") -> str:
    """``text`` if it is a short plain string (a name, a dtype, an answer like "b"), else
    ``default``."""
    ok = isinstance(text, str) and len(text) <= PLAIN_LIMIT and PLAIN.fullmatch(text)
    return text if ok else default


def is_shape(value) -> bool:
    """A list that could be a tensor's shape: at most 8 sizes, none negative, and no more
    elements in all than a kernel's memory could hold (sizes of any length could carry text in
    their digits)."""
    if type(value) is not list or len(value) > 8:
        return False
    if not all(type(n) is int and 0 <= n <= MAX_ELEMENTS for n in value):
        return False
    return math.prod(n for n in value if n) <= MAX_ELEMENTS


def short(value) -> str:
    """A value from a record, as the grader writes it: a short plain string, a number (an int of
    at most 15 digits, a float to six significant digits), a bool, None or a shape (`is_shape`);
    anything else is "something else"."""
    if isinstance(value, str):
        return json.dumps(plain(value, "a long or unusual string"))
    if type(value) is int and abs(value) >= 10**15:  # its digits could carry any text
        return "a very large int"
    if type(value) is float:  # six significant digits: a float's last ones could carry text
        return repr(float(f"{value:.6g}"))
    if value is None or type(value) in (bool, int):
        return json.dumps(value)
    if is_shape(value):
        return json.dumps(value)
    return "something else"


def describe(value) -> str:
    """What kind of value a record holds, in words ("a torch.float32 tensor of shape [3]")."""
    if isinstance(value, dict):
        if "tensor" in value:
            dtype = value["tensor"] if value["tensor"] in TORCH_DTYPES else "tensor of another"
            return f"a {dtype} tensor of shape {short(value.get('shape', ()))}"
        if "list" in value:
            kind = value.get("kind") if value.get("kind") in ("list", "tuple") else "sequence"
            return f"a {kind} of {len(value['list'])}"
        if "dict" in value:
            return "a dict"
        if "dtype" in value:
            return plain(value["dtype"], "a dtype")
        return f"an object of class {plain(value.get('object'), '?')}"
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, str):  # where a str is not expected, its text helps nobody
        return "a str"
    article = "an" if type(value).__name__ == "int" else "a"
    return f"{article} {type(value).__name__} {short(value)}"


def error_name(raised: object) -> str:
    """The name of an error the answer raised, if it is one of Python's own; else "an
    exception" (a class the answer made could be named anything)."""
    return raised if type(raised) is str and raised in BUILTIN_ERRORS else "an exception"
