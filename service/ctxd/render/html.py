"""The HTML template engine (autoescaped, StrictUndefined) and the security headers of its pages."""

import base64
import hashlib
from datetime import UTC, datetime

import jinja2
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.template.config import TemplateConfig
from markupsafe import Markup

from ctxd import __version__
from ctxd.fmt import human_duration, printable
from ctxd.render.markdown import TEMPLATES, human_bytes, utc


def ago(moment: datetime | None) -> str:
    if moment is None:
        return "?"
    return human_duration(max(0.0, (datetime.now(UTC) - moment).total_seconds())) + " ago"


def shown(value: object) -> object:
    """What every `{{ }}` of a page prints, before HTML escaping: text with control and bidi
    characters escaped (a stored dump older than that rule, text ctxd wrote itself). Markup
    stays Markup: the escapes hold no character HTML gives a meaning."""
    if isinstance(value, Markup):
        return Markup(printable(str(value)))
    return printable(value) if isinstance(value, str) else value


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        # Everything observed (log lines, command lines, journal text) reaches these pages:
        # escape by default, and fail on a missing field instead of printing nothing.
        autoescape=jinja2.select_autoescape(["html"], default_for_string=True),
        finalize=shown,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        # templates change with ctxd, not while it runs: no stat of each one at every render
        auto_reload=False,
    )
    env.filters.update(bytes=human_bytes, duration=human_duration, utc=utc, ago=ago)
    env.globals.update(ctxd_version=__version__)
    return env


ENV = environment()


def style_hash(env: jinja2.Environment) -> str:
    """CSP hash of the one inline stylesheet, so no other style (nor any script) may run."""
    css = env.get_template("_style.html").render()
    return "sha256-" + base64.b64encode(hashlib.sha256(css.encode()).digest()).decode()


CSP = "; ".join(
    [
        "default-src 'none'",
        f"style-src '{style_hash(ENV)}'",
        "img-src 'self' data:",
        "form-action 'self'",
        "base-uri 'none'",
        "frame-ancestors 'none'",
    ]
)

HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    # same-origin, not no-referrer: with no-referrer a form POST carries "Origin: null",
    # which the access check must refuse as it cannot tell it from a sandboxed attacker.
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
}


def template_config() -> TemplateConfig:
    return TemplateConfig(instance=JinjaTemplateEngine.from_environment(ENV))
