"""Pages rendered from the package's templates (``jobs/templates``), Jinja2 with autoescape on:
data is never pasted into HTML by hand."""

from __future__ import annotations

import functools
from typing import Any

from jobs.common.records import GateResult


@functools.cache
def _environment() -> Any:
    import jinja2

    return jinja2.Environment(
        loader=jinja2.PackageLoader("jobs", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render(template: str, **context: Any) -> str:
    """``jobs/templates/<template>`` rendered with ``context``."""
    return str(_environment().get_template(template).render(**context))


def gate_verdict(g: GateResult) -> str:
    """A gate's verdict in a word: passed, FAILED, accepted (failed, and accepted for the day
    by ``accept_gates``) or off (too little history to judge, or nothing to judge)."""
    if g.passed is False and g.accepted:
        return "accepted"
    return {True: "passed", False: "FAILED", None: "off"}[g.passed]
