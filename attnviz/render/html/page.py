"""One self-contained HTML file: the template, the data as one JSON blob, the script and the style inlined.

Nothing on the page comes from anywhere else: the Content-Security-Policy forbids every source but the
page's own script and style, allowed by their SHA-256 (computed here, at build time), so a token that
somehow became markup would still run nothing. Tokens reach the page only as JSON strings, which the
script puts into the page as text (``textContent``), never as markup.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import re
from importlib import resources
from typing import Any

from ..._version import __version__
from ...errors import AttnvizError

VIEWS = ("heatmap", "lines", "model", "heads", "ablate", "explain", "generate", "flow")
SCRIPTS = {"explain": "explain.js", "generate": "steps.js", "flow": "flow.js"}  # each its own script; else view.js
JSON_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


@functools.cache
def asset(name: str) -> str:
    """A file of the page (page.html, page.js, view.js, view.css), from the package."""
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def json_blob(data: Any) -> str:
    """``data`` as JSON that cannot end its <script> element or a line of the script: ``<``, ``>``, ``&``,
    U+2028 and U+2029 written as escapes (ASCII throughout, so lone surrogates are escapes too)."""
    text = json.dumps(data, ensure_ascii=True, sort_keys=True, separators=(",", ":"), allow_nan=False)
    for raw, escaped in JSON_ESCAPES.items():
        text = text.replace(raw, escaped)
    return text


def sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


def policy(script: str, style: str) -> str:
    """The Content-Security-Policy: nothing from anywhere; the page's own script and style by their hashes."""
    return (
        f"default-src 'none'; script-src {sha256(script)}; style-src {sha256(style)}; img-src data:; "
        "connect-src 'none'; font-src 'none'; frame-src 'none'; base-uri 'none'; form-action 'none'"
    )


def page_html(data: dict[str, Any]) -> str:
    """The page for ``data`` (see :mod:`.data`): its view, parts, style and how it was made."""
    if data.get("view") not in VIEWS:
        raise AttnvizError(f"no page for the view {data.get('view')!r}")
    shared = asset("page.js") + "\n" + asset("frame.js")  # what every page does, then its view's own script
    script = "\n" + shared + "\n" + asset(SCRIPTS.get(data["view"], "view.js"))
    style = "\n" + asset("view.css")
    if "</script" in script.lower() or "</style" in style.lower():
        raise AttnvizError("the page's script or style would end its own element")  # a packaging error
    values = {
        "policy": policy(script, style),
        "version": __version__,
        "style": style,
        "data": json_blob(data),
        "script": script,
    }
    # one pass over the template: what is put in is never read again for markers (a token "{{script}}")
    page = re.sub(r"\{\{(\w+)\}\}", lambda marker: values[marker.group(1)], asset("page.html"))
    return page


def page_bytes(data: dict[str, Any]) -> bytes:
    return page_html(data).encode("utf-8")
