"""Audit of the token shapes: no redaction leaves a token's first or last characters.

For every row of redact/shapes.py, tokens of the documented length and of 1 to 3 characters
more or fewer are put in the contexts a credential is met in (an .npmrc `_authToken=`, an
`Authorization: Bearer` header, a JSON value, a URL query parameter, a line of prose); no run
of 4 characters of the token may be left in what the redactor returns.
"""

import random
import string

import pytest
from ctxd import redact
from ctxd.redact import shapes as redact_shapes

pytestmark = pytest.mark.usefixtures("fresh_redaction")

UPPER_DIGITS = string.ascii_uppercase + string.digits
ALNUM = string.ascii_letters + string.digits
URLSAFE = ALNUM + "_-"
HEX = "0123456789abcdef"

# shape -> [(prefix, alphabet of the body, documented body length)]; a body written as
# "{}" in a template is where the varying part goes (tokens made of several parts).
DOCUMENTED: dict[str, list[tuple[str, str, int]]] = {
    "aws-access-key-id": [("AKIA", UPPER_DIGITS, 16), ("ASIA", UPPER_DIGITS, 16)],
    "github-token": [("ghp_", ALNUM, 36), ("ghs_", ALNUM, 36)],
    "github-fine-grained": [("github_pat_", ALNUM + "_", 82)],
    "gitlab-token": [("glpat-", URLSAFE, 20), ("glrt-", URLSAFE, 20)],
    "openai-anthropic": [
        ("sk-", ALNUM, 48),
        ("sk-proj-", URLSAFE, 156),
        ("sk-ant-api03-", URLSAFE, 95),
    ],
    "stripe": [("sk_live_", ALNUM, 24), ("rk_test_", ALNUM, 99)],
    "stripe-webhook": [("whsec_", ALNUM, 32)],
    "hugging-face": [("hf_", ALNUM, 34)],
    "slack-token": [("xoxb-", ALNUM + "-", 50)],
    "slack-app": [("xapp-", ALNUM + "-", 90)],
    "slack-webhook": [("https://hooks.slack.com/services/T01234567/B01234567/", ALNUM, 24)],
    "google-api-key": [("AIza", URLSAFE, 35)],
    "google-oauth-access": [("ya29.", URLSAFE, 150)],
    "google-oauth-refresh": [("1//0", URLSAFE, 100)],
    "npm": [("npm_", ALNUM, 36)],
    "pypi": [("pypi-", URLSAFE, 170)],
    "jwt": [("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.", URLSAFE, 43)],
    "digitalocean": [("dop_v1_", HEX, 64)],
    "shopify": [("shpat_", HEX, 32)],
    "sendgrid": [("SG.abcdefghijABCDEFGHIJ12.", URLSAFE, 43)],
    "databricks": [("dapi", HEX, 32)],
    "groq": [("gsk_", ALNUM, 52)],
    "replicate": [("r8_", ALNUM, 37)],
    "linear": [("lin_api_", ALNUM, 40)],
    "doppler": [("dp.pt.", ALNUM, 43)],
    "age-secret-key": [("AGE-SECRET-KEY-1", UPPER_DIGITS, 58)],
    "twilio-api-key": [("SK", HEX, 32)],
    "vault": [("hvs.", URLSAFE, 95), ("hvb.", URLSAFE, 138), ("hvr.", URLSAFE, 90)],
    "vault-legacy": [("s.", ALNUM, 24)],
}
CONTEXTS = (
    "//registry.npmjs.org/:_authToken={}",
    "Authorization: Bearer {}",
    '{"registry": "https://registry.example.com", "value": "{}", "n": 1}',
    "https://example.com/api/items?q={}&page=2",
    "the service answered with {} and stopped.",
)
DELTAS = (-3, -2, -1, 0, 1, 2, 3)


def _token(rng: random.Random, prefix: str, alphabet: str, length: int) -> str:
    body = [rng.choice(alphabet) for _ in range(length)]
    # Every class of the alphabet once, so a shape that asks for mixed case finds it.
    for i, needed in enumerate(
        c
        for c in (string.ascii_lowercase, string.ascii_uppercase, string.digits)
        if set(c) & set(alphabet)
    ):
        body[(i * 7) % length] = rng.choice(sorted(set(needed) & set(alphabet)))
    return prefix + "".join(body)


def _leftovers(token: str, context: str, out: str) -> list[str]:
    """Runs of 4 characters of the token found in the output (unless the context has them)."""
    frame = context.replace("{}", "\0")
    runs = {token[i : i + 4] for i in range(len(token) - 3)}
    return sorted(run for run in runs if run in out and run not in frame)


def test_every_shape_is_audited() -> None:
    assert set(DOCUMENTED) == {name for name, _, _ in redact_shapes.SHAPES}


@pytest.mark.parametrize("shape", sorted(DOCUMENTED))
def test_no_redaction_leaves_part_of_a_token(shape: str) -> None:
    rng = random.Random(shape)
    failures = []
    for prefix, alphabet, documented in DOCUMENTED[shape]:
        for delta in DELTAS:
            token = _token(rng, prefix, alphabet, documented + delta)
            for context in CONTEXTS:
                text = context.replace("{}", token)
                out = redact.text(text)
                if left := _leftovers(token, context, out):
                    failures.append(f"{delta:+d} in {context!r}: {out!r} keeps {left[:3]}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize(
    "text",
    [
        "s.replace(old, new)",
        "self.s.AbstractEventLoopPolicy",  # a name with no digit
        "see s.ThisNameHasADigit1ButGoesOnMuchLonger",  # longer than a legacy token
        "hvs is not a token, nor is npm_install",
        "dapi0123 and SK12 are too short",
    ],
)
def test_ordinary_text_near_the_new_shapes_is_kept(text: str) -> None:
    assert redact.text(text) == text


def test_the_findings_tokens() -> None:
    npm = "npm_" + "a1B2c3D4e5" * 3 + "f6G7h8i" + "2"  # 37 characters after the prefix
    out = redact.text(f"//registry.npmjs.org/:_authToken={npm}\n")
    assert out == "//registry.npmjs.org/:_authToken=[REDACTED]\n"
    vault = "hvs.CAESIJlWh3fPZ1aB2cD3eF4gH5iJ6kL7mN8oP9qR0sT1uV2wGh4KHGh2cy5BQ2RlRkdoSWpLbE1u"
    assert redact.text(vault + "\n") == "[REDACTED]\n"
    assert redact.lines(["token:", vault]) == ["token:", "[REDACTED]"]
