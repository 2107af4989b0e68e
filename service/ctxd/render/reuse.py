"""The sections of one dump rendered again as a budget cut shortens it (`recovery.for_model`):
each partial's text kept by the values it reads, so a section the cut left as it was is the
text it was, not rendered again. Nothing is kept beyond one cut of one snapshot."""

import contextvars
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import jinja2
import pydantic_core
from jinja2 import meta, nodes
from jinja2.runtime import Context
from pydantic import BaseModel

RootRender = Callable[[Context], Iterator[str]]
Reads = dict[str, tuple[str, ...] | None]  # a name -> the attributes read of it (None: all)


class Sections:
    """The partials' texts of the renders of one cut. The first render only notes what each
    partial read (a dump that fits needs no more); `keep` then keys its texts by those
    values, before any step cuts them, and every later render reuses a text whose partial
    reads the same values. `follow` gives the JSON of each part of the snapshot as it
    stands, so that the next render keys its partials by those texts instead of encoding
    what they read again."""

    def __init__(self) -> None:
        self.texts: dict[Key, str] = {}
        self._noted: list[tuple[str, dict[str, Any], str]] = []
        self._keeping = False
        self._parts: Parts = {}
        self._of = 0  # the id of the snapshot `_parts` are of

    def follow(
        self, snapshot: BaseModel, touched: Iterable[str] | None = None
    ) -> tuple[bytes, ...]:
        """The JSON of each field of `snapshot` and of each model it holds (its header, its
        narrative, its observations), one text per field: later renders (and `keep`) key a
        partial by these rather than by encoding what it reads, and the texts, compared,
        tell whether anything in the snapshot changed. Call it after every change of the
        snapshot, before the next render; `touched`: the only fields the change could
        reach ("observations.logs", "signals"), whose JSON alone is taken again."""
        if touched is None or self._of != id(snapshot) or not self._parts:
            self._parts, self._of = parts(snapshot), id(snapshot)
        else:
            for path in touched:
                *holders, field = path.split(".")
                model = snapshot
                for holder in holders:
                    model = getattr(model, holder)
                self._parts[(id(model), field)] = pydantic_core.to_json(getattr(model, field))
        return tuple(self._parts.values())

    def keep(self) -> None:
        """Key the texts of the render just made (call it before its snapshot is cut)."""
        for name, values, text in self._noted:
            key = _key(name, values, self._parts)
            if key is not None:
                self.texts[key] = text
        self._noted.clear()
        self._keeping = True

    def text(self, name: str, context: Context, render: RootRender) -> str:
        values = context.get_all()
        if not self._keeping:
            text = "".join(render(context))
            self._noted.append((name, dict(values), text))
            return text
        key = _key(name, values, self._parts)
        if key is None:
            return "".join(render(context))
        kept = self.texts.get(key)
        if kept is None:
            kept = self.texts[key] = "".join(render(context))
        return kept


Parts = dict[tuple[int, str], bytes]  # (a model's id, one of its fields) -> that field's JSON
Key = tuple[bytes, ...]


def parts(snapshot: BaseModel) -> Parts:
    """The JSON of each field of `snapshot`, those of the models it holds field by field
    instead: together, all of the snapshot's JSON, each part found by the model that holds
    it (a partial reads `o.logs`: the observations' `logs`)."""
    found: Parts = {}
    models = [snapshot]
    for field in type(snapshot).model_fields:
        value = getattr(snapshot, field)
        if isinstance(value, BaseModel):
            models.append(value)
        else:
            found[(id(snapshot), field)] = pydantic_core.to_json(value)
    for model in models[1:]:
        for field in type(model).model_fields:
            found[(id(model), field)] = pydantic_core.to_json(getattr(model, field))
    return found


_ACTIVE: contextvars.ContextVar[Sections | None] = contextvars.ContextVar("sections", default=None)


def rendering(sections: Sections | None) -> contextvars.Token[Sections | None]:
    """Renders from now on keep their partials' texts in `sections` (None: none kept);
    `_ACTIVE.reset(token)` ends it."""
    return _ACTIVE.set(sections)


def done(token: contextvars.Token[Sections | None]) -> None:
    _ACTIVE.reset(token)


def reusable(env: jinja2.Environment, name: str) -> None:
    """Make the partial `name` of `env` reuse its texts while a Sections is active. A partial
    that includes or imports another is left as it is: what the other reads is not known."""
    template = env.get_template(name)
    if name in _READS or _READS.setdefault(name, _reads(env, name)) is None:
        return
    render = template.root_render_func

    def root(context: Context) -> Iterator[str]:
        sections = _ACTIVE.get()
        if sections is None:
            yield from render(context)
        else:
            yield sections.text(name, context, render)

    template.root_render_func = root


_READS: dict[str, Reads | None] = {}


def _reads(env: jinja2.Environment, name: str) -> Reads | None:
    """The names a partial reads from its context, each with the attributes it reads of it
    when it reads nothing else of it (`o.logs`: the logs, not every section of `o`); None
    when it includes or imports another template."""
    assert env.loader is not None
    tree = env.parse(env.loader.get_source(env, name)[0])
    if any(True for _ in tree.find_all((nodes.Include, nodes.Import, nodes.FromImport))):
        return None
    if any(True for _ in tree.find_all(nodes.Extends)):
        return None
    loads = [n for n in tree.find_all(nodes.Name) if n.ctx == "load"]
    stored = {n.name for n in tree.find_all(nodes.Name) if n.ctx in ("store", "param")}
    names = meta.find_undeclared_variables(tree) | ({n.name for n in loads} - stored)
    attributes: dict[str, set[str]] = {}
    through_attribute: set[int] = set()
    for node in tree.find_all(nodes.Getattr):
        if isinstance(node.node, nodes.Name):
            attributes.setdefault(node.node.name, set()).add(node.attr)
            through_attribute.add(id(node.node))
    whole = {n.name for n in loads if id(n) not in through_attribute}
    return {
        var: None if var in whole or var not in attributes else tuple(sorted(attributes[var]))
        for var in sorted(names)
    }


_MISSING = object()


def _key(name: str, values: dict[str, Any], known: Parts | None = None) -> Key | None:
    """What a partial's text follows from: the JSON of the values it reads (of a model it
    reads attributes of, those attributes'), a function by its identity, in one encoding;
    an attribute of a model `known` holds (`Sections.follow`) by that JSON, with its place
    marked in the rest. None when it reads anything else (an object whose JSON would not
    tell its content), and is then rendered."""
    reads = _READS[name]
    assert reads is not None
    picked: list[object] = [name]
    found: list[bytes] = []
    for var, attributes in reads.items():
        value = values.get(var, _MISSING)
        if attributes is not None and isinstance(value, BaseModel):
            for attribute in attributes:
                part = known.get((id(value), attribute)) if known else None
                if part is None:
                    picked.append(getattr(value, attribute, _MISSING))
                else:  # its JSON as `follow` took it, after the rest, in the order of reads
                    picked.append(f"\0part {var}.{attribute}")
                    found.append(part)
        else:
            picked.append(value)
    try:
        return (pydantic_core.to_json(picked, fallback=_function), *found)
    except pydantic_core.PydanticSerializationError:  # what `_function` refused
        return None


def _function(value: object) -> str:
    """A function (a template's global, a filter) by its identity: it does not change."""
    if value is _MISSING:
        return "\0missing"
    if callable(value):
        return f"\0{type(value).__qualname__}@{id(value)}"
    raise TypeError(f"no key for a {type(value).__qualname__}")
