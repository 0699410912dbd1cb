"""pyproject.toml's extras never hold a base dependency back: installing
``.[test]`` (or any extra) after ``pip install -e .`` must not downgrade what
the base install chose (issue 42: ``.[test]`` took confluent-kafka from 2.16
to 2.12, because quixstreams, then in the test extra, pins it below 2.13).
A package that needs an older version of one runs in a virtualenv of its own
(tests/venvs.py), as quixstreams now does.

What is checked here is what pyproject.toml says itself: an extra that
names a base dependency sets no upper bound on it. What the extras' own
dependencies pin is pip's to find (docs/development.md says how it was
measured)."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(.*)")


def _parse(requirement: str) -> tuple[str, str]:
    """(canonical name, version specifiers) of a requirement string."""
    name, _, spec = NAME.match(requirement.split(";")[0]).groups()
    return re.sub(r"[-_.]+", "-", name).lower(), spec.strip()


def test_no_extra_caps_a_base_dependency():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    base = {_parse(r)[0] for r in project["dependencies"]}
    capped = {}
    for extra, requirements in project["optional-dependencies"].items():
        for requirement in requirements:
            name, spec = _parse(requirement)
            # <, <=, == and ~= keep a newer release out; >= and != do not
            if name in base and re.search(r"<|==|~=", spec):
                capped.setdefault(extra, []).append(requirement)
    assert not capped, (f"extras cap base dependencies {capped}: installing the extra after "
                        f"the base install would downgrade them")
