"""The shell tokenizer: a command line split into pipelines of words, without running it.

shlex does the quoting; this adds what it lacks for shell: operators as their own tokens,
comments only at the start of a word, glued file-descriptor numbers (`2>`) marked, heredoc
bodies skipped, and expansions (`$(…)`, `${…}`, backquotes) kept whole inside their word, as
written: `/tmp/x/$(id).log` is one word, not a word, a subshell and a command `.log`. Raises
ValueError on unbalanced quotes or expansions, like shlex.
"""

import re
import shlex

_PUNCT = "();<>|&\n"
_OPERATOR = re.compile(r"&>>|&&|\|\||;;|>>|&>|>&|<<<|<<|<&|\|&|>\||[;&|()<>\n]")
_SEPARATORS = {";", "&", "&&", "||", "\n", "(", ")", ";;"}
_GLUED_FD = re.compile(r"(?<!\S)([0-9])(?=[<>])")
FD_MARK = "\x01fd"
# An expansion stands in the text shlex reads as \x02<n>\x03, put back in the words after.
_HOLE = re.compile("\x02([0-9]+)\x03")


def _strip_comments(text: str) -> str:
    """The text without `# …` comments: a `#` that starts a word outside quotes, to the end
    of its line (the newline stays, it separates commands). shlex's own comment handling
    also ends a word at a `#` inside it (`a#b`) and eats the newline."""
    out: list[str] = []
    quote = ""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\" and quote != "'":
            out.append(text[i : i + 2])
            i += 2
            continue
        if quote:
            if c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or text[i - 1] in " \t\n;&|()"):
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _expansion_end(text: str, start: int) -> int:
    """The index after the expansion that starts at `start` (`$(`, `${` or a backquote)."""
    if text[start] == "`":
        i = start + 1
        while i < len(text) and text[i] != "`":
            i += 2 if text[i] == "\\" else 1
        if i >= len(text):
            raise ValueError("unbalanced backquote")
        return i + 1
    opening = text[start + 1]
    closing = ")" if opening == "(" else "}"
    depth, quote, i = 1, "", start + 2
    while i < len(text):
        c = text[i]
        if c == "\\" and quote != "'":
            i += 2
            continue
        if quote:
            quote = "" if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == opening:
            depth += 1
        elif c == closing:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ValueError("unbalanced expansion")


def _hide_expansions(text: str) -> tuple[str, list[str]]:
    """The text with each expansion outside single quotes replaced by a hole, and the
    expansions as written, in order."""
    text = text.replace("\x02", "").replace("\x03", "")
    out: list[str] = []
    found: list[str] = []
    quote = ""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\" and quote != "'":
            out.append(text[i : i + 2])
            i += 2
            continue
        if quote == "'":
            quote = "" if c == "'" else quote
        elif c == "`" or (c == "$" and text[i + 1 : i + 2] in ("(", "{")):
            end = _expansion_end(text, i)
            out.append(f"\x02{len(found)}\x03")
            found.append(text[i:end])
            i = end
            continue
        elif c == '"' or (c == "'" and not quote):
            quote = "" if quote == c else c
        out.append(c)
        i += 1
    return "".join(out), found


def tokens(text: str) -> list[str]:
    text, expansions = _hide_expansions(_strip_comments(text))
    # shlex loses adjacency, so `2>f` and `8000 > f` would read alike: mark a glued fd first.
    text = _GLUED_FD.sub(lambda m: f"{FD_MARK}{m[1]} ", text)
    lexer = shlex.shlex(text, posix=True, punctuation_chars=_PUNCT)
    lexer.whitespace = " \t\r"
    lexer.whitespace_split = True
    lexer.commenters = ""
    out: list[str] = []
    for token in lexer:
        if token and all(c in _PUNCT for c in token):
            out.extend(_OPERATOR.findall(token))
        else:
            out.append(_HOLE.sub(lambda m: expansions[int(m[1])], token) if expansions else token)
    return out


def pipelines(tokens: list[str]) -> list[tuple[list[list[str]], bool]]:
    """[(simple commands of one pipeline, sent to the background with '&')]."""
    result: list[tuple[list[list[str]], bool]] = []
    pipeline: list[list[str]] = []
    current: list[str] = []
    heredoc: str | None = None
    for i, token in enumerate(tokens):
        if heredoc is not None:
            if token == heredoc and i > 0 and tokens[i - 1] == "\n":
                heredoc = None
            continue
        if token == "<<" and i + 1 < len(tokens):
            heredoc = tokens[i + 1].lstrip("-")
            current.append(token)
            continue
        if token in ("|", "|&"):
            pipeline.append(current)
            current = []
        elif token in _SEPARATORS:
            pipeline.append(current)
            pipeline = [c for c in pipeline if c]
            if pipeline:
                result.append((pipeline, token == "&"))
            pipeline, current = [], []
        else:
            current.append(token)
    pipeline.append(current)
    pipeline = [c for c in pipeline if c]
    if pipeline:
        result.append((pipeline, False))
    return result
