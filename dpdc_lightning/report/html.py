"""Plain semantic HTML for the reports: one self-contained page, escaped text, inlined images.

No JavaScript, no network (a Content-Security-Policy forbids every fetch; images are ``data:``
URIs), a small inline stylesheet that prints. Every string that reaches the page goes through
:func:`text` (``html.escape``, quotes included): class names, paths and error messages are user
input. A value taken from a file carries ``data-source="FILE:FIELD"`` (an image
``data-source="FILE"``) so that a reader, and the neighbouring-run test, can tell which released
field each shown value is. html.escape and a dozen small functions instead of a template engine
(Jinja2): the page is a few tables and figures, and a template would be a second language and a
declared dependency for them.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Iterable, Sequence

STYLE = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif;
  color: #1b1b1b; max-width: 60rem; margin: 1.5rem auto; padding: 0 1rem; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; } h2 { font-size: 1.25rem; margin-top: 2rem;
  border-bottom: 1px solid #ccc; } h3 { font-size: 1.05rem; }
table { border-collapse: collapse; margin: .5rem 0 1rem; } caption { text-align: left;
  font-weight: 600; } th, td { border: 1px solid #ccc; padding: .2rem .5rem; text-align: left;
  vertical-align: top; } th { background: #f3f3f3; } td.n { text-align: right;
  font-variant-numeric: tabular-nums; }
figure { margin: 1rem 0; } img { max-width: 100%; height: auto; border: 1px solid #ddd; }
figcaption { font-size: .9rem; color: #444; }
.covered, .not-covered, .warning { padding: .4rem .8rem; margin: .8rem 0; }
.covered { border-left: 5px solid #2a7d4f; background: #eef7f1; }
.not-covered { border-left: 5px solid #b3261e; background: #fcefee; }
.warning { border-left: 5px solid #b36b00; background: #fff6e5; }
.big { font-size: 1.3rem; font-weight: 600; }
pre { background: #f6f6f6; padding: .6rem; overflow-x: auto; font-size: .85rem; }
@media print { body { max-width: none; margin: 0; font-size: 11pt; } section, figure, table {
  break-inside: avoid; } a { color: inherit; text-decoration: none; } }
"""
POLICY = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"


def text(value: object) -> str:
    """Escaped for HTML text and attribute values."""
    return html.escape(str(value), quote=True)


def sourced(value: object, source: str, *, tag: str = "span") -> str:
    """``value`` shown as taken from ``source`` (``FILE:FIELD``)."""
    return f'<{tag} data-source="{text(source)}">{text(value)}</{tag}>'


def number(value: float | int | None, digits: int = 4) -> str:
    """A number as the tables print it: ``digits`` significant digits, None as "none"."""
    if value is None:
        return "none"
    if isinstance(value, bool) or isinstance(value, int):
        return str(value)
    return f"{value:.{digits}g}"


def image(png: bytes, *, alt: str, caption: str = "", source: str | None = None) -> str:
    """A figure with the PNG inlined as a ``data:`` URI; ``caption`` is already HTML."""
    uri = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
    origin = f' data-source="{text(source)}"' if source else ""
    return (
        f'<figure><img src="{uri}" alt="{text(alt)}"{origin}>'
        + (f"<figcaption>{caption}</figcaption>" if caption else "")
        + "</figure>"
    )


def table(header: Sequence[str], rows: Iterable[Sequence[str]], *, caption: str = "") -> str:
    """A table whose cells are already HTML (escape with :func:`text` or :func:`sourced`)."""
    head = "".join(f'<th scope="col">{text(h)}</th>' for h in header)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    title = f"<caption>{caption}</caption>" if caption else ""
    return f"<table>{title}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def facts(pairs: Iterable[tuple[str, str]]) -> str:
    """A two-column table of (name, HTML value)."""
    rows = "".join(f'<tr><th scope="row">{text(k)}</th><td>{v}</td></tr>' for k, v in pairs)
    return f"<table><tbody>{rows}</tbody></table>"


def box(kind: str, body: str) -> str:
    """A marked paragraph: ``covered``, ``not-covered`` or ``warning``; ``body`` is HTML."""
    return f'<div class="{kind}">{body}</div>'


def section(anchor: str, title: str, body: str) -> str:
    return f'<section id="{text(anchor)}"><h2>{text(title)}</h2>{body}</section>'


def page(title: str, *, header: str, sections: Sequence[str], footer: str) -> str:
    """The whole document; ``header``, ``sections`` and ``footer`` are HTML."""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{POLICY}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{text(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
        f"<header>{header}</header>\n<main>\n"
        + "\n".join(sections)
        + f"\n</main>\n<footer>{footer}</footer>\n</body>\n</html>\n"
    )
