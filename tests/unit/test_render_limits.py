"""The bounded template sandbox (issue 25): steps, integer size, repeats, arguments and output are
bounded for preview and sending alike; every refusal is a TemplateProblem with a code."""
from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opsboard.notifications import render


def _refused(body: str) -> str:
    started = time.monotonic()
    with pytest.raises(render.TemplateProblem) as exc:
        render.render("inbox", "en", "s", body, {})
    assert time.monotonic() - started < 1.0
    return exc.value.code


@settings(max_examples=50, deadline=None)
@given(base=st.integers(2, 10**6), exponent=st.integers(render.MAX_INT_BITS + 1, 10**12))
def test_big_powers_are_refused_before_they_are_computed(base, exponent):
    assert _refused(f"{{{{ {base} ** {exponent} }}}}") == "too_large"


@settings(max_examples=50, deadline=None)
@given(text=st.text(alphabet="ab", min_size=1, max_size=5), n=st.integers(render.MAX_SEQUENCE + 1, 10**12))
def test_big_repeats_are_refused(text, n):
    assert _refused(f"{{{{ '{text}' * {n} }}}}") == "too_large"
    assert _refused(f"{{{{ [1] * {n} }}}}") == "too_large"


@settings(max_examples=30, deadline=None)
@given(outer=st.integers(400, 10**6), inner=st.integers(400, 40000))
def test_nested_loops_are_counted(outer, inner):
    body = f"{{% for a in range({outer}) %}}{{% for b in range({inner}) %}}{{% endfor %}}{{% endfor %}}x"
    assert _refused(body) in ("too_many_steps", "too_large")


@pytest.mark.parametrize("body, code", [
    ("{{ lipsum(20000) }}", "missing_variable"),
    ("{% include 'x' %}", "unsupported_tag"), ("{% import 'x' as y %}", "unsupported_tag"),
    ("{% extends 'x' %}", "unsupported_tag"), ("{% from 'x' import y %}", "unsupported_tag"),
    ("{{ range(10**9) }}", "too_large"), ("{{ 3**(10**5) }}", "too_large"),
    ("{% macro m(n) %}{{ m(n) }}{% endmacro %}{{ m(1) }}", "too_many_steps"),
    ("{{ 'x'|center(10**8) }}", "too_large"), ("{{ '%999999999d' % 1 }}", "too_large"),
    ("{{ '{:>999999999}'.format(1) }}", "too_large"),
    ("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", "too_large"),
    ("{% set s = 'x' * 40000 %}{{ s|replace('x', s) }}", "too_large"),
    ("{{ 1/0 }}", "render_error"), ("{{ " + "(" * 3000 + "1" + ")" * 3000 + " }}", "too_many_steps"),
])
def test_reported_and_related_templates_are_refused(body, code):
    assert _refused(body) == code


def test_output_is_capped():
    body = "{% for i in range(30000) %}xx{% endfor %}"
    assert _refused(body) == "too_large"


def test_ordinary_templates_still_render():
    out = render.render("email", "en", "Hi {{ name }}", "{% for i in range(3) %}{{ i }}{% endfor %} {{ 2 ** 10 }} "
                        "{{ 'ab' * 2 }} {{ '%5d' % 3 }} {{ [1, 2]|join(',') }} {{ 12345678|money('EUR') }} "
                        "{{ '<b>' ~ name }} {{ 'x'|center(5) }}", {"name": "<i>"})
    assert out == ("Hi &lt;i&gt;", "012 1024 abab     3 1,2 123,456.78 EUR &lt;b&gt;&lt;i&gt;   x")
