"""The shell tokenizer: a command line split into pipelines of words, without running it.

shlex does the quoting; this adds what it lacks for shell: operators as their own tokens,
comments only at the start of a word, glued file-descriptor numbers (`2>`) marked, and
heredoc bodies skipped. Raises ValueError on unbalanced quotes, like shlex.
"""

import re
import shlex

_PUNCT = "();<>|&\n"
_OPERATOR = re.compile(r"&>>|&&|\|\||;;|>>|&>|>&|<<<|<<|<&|\|&|>\||[;&|()<>\n]")
_SEPARATORS = {";", "&", "&&", "||", "\n", "(", ")", ";;"}
_GLUED_FD = re.compile(r"(?<!\S)([0-9])(?=[<>])")
FD_MARK = "\x01fd"


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


def tokens(text: str) -> list[str]:
    # shlex loses adjacency, so `2>f` and `8000 > f` would read alike: mark a glued fd first.
    text = _GLUED_FD.sub(lambda m: f"{FD_MARK}{m[1]} ", _strip_comments(text))
    lexer = shlex.shlex(text, posix=True, punctuation_chars=_PUNCT)
    lexer.whitespace = " \t\r"
    lexer.whitespace_split = True
    lexer.commenters = ""
    out: list[str] = []
    for token in lexer:
        if token and all(c in _PUNCT for c in token):
            out.extend(_OPERATOR.findall(token))
        else:
            out.append(token)
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
