"""Cheap fixes for costs that are not ours but dominate grading time. Both keep the libraries'
results; they only stop rebuilding the same validator over and over.

Runs in: the grader and its workers.

nbconvert validates the notebook after every preprocessor with ``relax_add_props=True``, and
nbformat (5.10) compiles a new JSON-schema validator for each such call (about 80 ms; 13 times
per notebook in autograde): more than half of recording a graded notebook. The schema never
changes within a process, so one compiled validator per argument set serves every call. (It also
stops the relaxed validator from replacing the strict one in nbformat's cache.)

nbgrader checks each cell's metadata with ``jsonschema.validate``, which checks the schema itself
again on every call: about 0.2 s per notebook pass.

When each patch can go: both are needed with nbformat 5.10.4 and nbgrader 0.9.6 (our pins), and
no upstream issue or release tracks either yet (their trackers searched on 2026-12-01). Drop
`cache_notebook_validators` once nbformat's ``get_validator`` caches what it compiles, and
`cache_cell_metadata_validators` once nbgrader's ``nbgraderformat.common`` validates with a
prebuilt validator instead of ``jsonschema.validate``; `benchmarks/kernel_costs.py` shows the cost.
"""

from __future__ import annotations

import functools
import json
import types

import jsonschema
import nbformat.validator
import nbgrader.api
import nbgrader.nbgraderformat.common as nbgrader_format


def cache_validators() -> None:
    cache_notebook_validators()
    cache_cell_metadata_validators()
    reuse_engines()


def cache_notebook_validators() -> None:
    """Make nbformat build each validator once per process (idempotent)."""
    get = nbformat.validator.get_validator
    if not hasattr(get, "cache_info"):
        nbformat.validator.get_validator = functools.lru_cache(maxsize=None)(get)


@functools.lru_cache(maxsize=None)
def _checked_validator(schema_json: str):
    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def _validate(instance, schema) -> None:
    """``jsonschema.validate``, with the schema checked once instead of on every call."""
    validator = _checked_validator(json.dumps(schema, sort_keys=True))
    error = jsonschema.exceptions.best_match(validator.iter_errors(instance))
    if error is not None:
        raise error


def cache_cell_metadata_validators() -> None:
    """Make nbgrader's cell metadata checks reuse one checked schema (idempotent)."""
    nbgrader_format.jsonschema = types.SimpleNamespace(validate=_validate)


def reuse_engines() -> None:
    """Make nbgrader's ``Gradebook`` reuse one SQLAlchemy engine per database URL (idempotent).

    nbgrader makes a new engine for every ``Gradebook`` it opens (a dozen per graded notebook),
    and an engine's compiled-statement cache dies with it: every query was compiled again, about
    a third of recording a notebook. ``Gradebook.close`` still disposes of the engine's
    connections, so no file stays open between uses; the engine only keeps its cache.
    """
    if not hasattr(nbgrader.api.create_engine, "cache_info"):
        nbgrader.api.create_engine = functools.lru_cache(maxsize=64)(nbgrader.api.create_engine)
