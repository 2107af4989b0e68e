"""The maintained rule set of token shapes: one row per credential format, compiled once.

Each row names a vendor's documented token prefix and body. The rows were written for ctxd
from the vendors' own documentation of their key formats; no third-party rule set (gitleaks,
trufflehog, detect-secrets) was copied. To add a format, add a row and a case in
tests/test_redact.py: a shape is kept only if it starts with a fixed prefix, so ordinary log
text never matches it and the cheap trigger below stays exact.

A body takes the whole run of its alphabet (a possessive `{n,}+`, never a fixed `{n}`), and a
fixed documented length is a minimum three below it: a token one character longer than
documented is redacted whole rather than leaving its last characters, and one a little
shorter still is. tests/test_redact_audit.py checks this for every row.
"""

import re

# (name, prefix pattern, body pattern). Bodies use possessive quantifiers so a long run
# that fails later costs one pass, not a backtrack per character.
SHAPES: tuple[tuple[str, str, str], ...] = (
    ("aws-access-key-id", r"(?:AKIA|ASIA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|ABIA|ACCA)",
     r"[A-Z0-9]{13,}+(?![A-Za-z0-9])"),
    ("github-token", r"gh[pousr]_", r"[A-Za-z0-9]{30,}+"),
    ("github-fine-grained", r"github_pat_", r"[A-Za-z0-9_]{20,}+"),
    # GitLab's routable tokens end in `.<version>.<crc>`.
    ("gitlab-token", r"(?:glpat|gldt|glrt|glptt|glsoat|glcbt|glimt|glagent|gloas)-",
     r"[A-Za-z0-9_-]{16,}+(?:\.[A-Za-z0-9_-]{1,64}+){0,2}"),
    # OpenAI (sk-, sk-proj-, sk-svcacct-) and Anthropic (sk-ant-api03-, sk-ant-admin01-).
    ("openai-anthropic", r"sk-", r"[A-Za-z0-9_-]{20,}+"),
    ("stripe", r"(?:sk|rk|pk)_(?:live|test)_", r"[A-Za-z0-9]{10,}+"),
    ("stripe-webhook", r"whsec_", r"[A-Za-z0-9]{20,}+"),
    ("hugging-face", r"hf_", r"[A-Za-z0-9]{30,}+"),
    ("slack-token", r"xox[abposre]-", r"[A-Za-z0-9-]{10,}+"),
    ("slack-app", r"xapp-", r"[A-Za-z0-9-]{10,}+"),
    ("slack-webhook", r"https://hooks\.slack\.com/(?:services|workflows|triggers)/",
     r"[A-Za-z0-9/_+-]{10,}+"),
    ("google-api-key", r"AIza", r"[A-Za-z0-9_-]{32,}+"),
    ("google-oauth-access", r"ya29\.", r"[A-Za-z0-9_-]{20,}+"),
    ("google-oauth-refresh", r"1//0", r"[A-Za-z0-9_-]{30,}+"),
    ("npm", r"npm_", r"[A-Za-z0-9]{33,}+"),
    ("pypi", r"pypi-", r"[A-Za-z0-9_-]{50,}+"),
    ("jwt", r"eyJ", r"[A-Za-z0-9_-]{5,}+\.eyJ[A-Za-z0-9_-]{5,}+\.[A-Za-z0-9_-]*+"),
    ("digitalocean", r"do[opr]_v1_", r"[a-f0-9]{61,}+"),
    ("shopify", r"shp(?:at|ca|pa|ss)_", r"[a-fA-F0-9]{29,}+"),
    ("sendgrid", r"SG\.", r"[A-Za-z0-9_-]{19,}+\.[A-Za-z0-9_-]{40,}+"),
    ("databricks", r"dapi", r"[a-f0-9]{29,}+(?:-[0-9]{1,4}+)?(?![A-Za-z0-9])"),
    ("groq", r"gsk_", r"[A-Za-z0-9]{40,}+"),
    ("replicate", r"r8_", r"[A-Za-z0-9]{30,}+"),
    ("linear", r"lin_api_", r"[A-Za-z0-9]{30,}+"),
    ("doppler", r"dp\.(?:pt|st|sa|ct|scim|audit)\.", r"[A-Za-z0-9]{30,}+"),
    ("age-secret-key", r"AGE-SECRET-KEY-1", r"[A-Z0-9]{50,}+"),
    ("twilio-api-key", r"SK", r"[a-f0-9]{29,}+(?![A-Za-z0-9])"),
    # Vault: service, batch and recovery tokens (hvs. + about 90, hvb. + about 140).
    ("vault", r"hv[sbr]\.", r"[A-Za-z0-9_-]{20,}+"),
    # Vault before 1.10: `s.` and 24 base62 characters. `s.` alone is far too common, so the
    # prefix needs 21 characters behind it, the body upper and lower case and a digit (a
    # token without a digit, about 1 in 70, is found by name only), and nothing after.
    ("vault-legacy", r"s\.(?=[A-Za-z0-9]{21})",
     r"(?=[A-Za-z0-9]{0,26}[a-z])(?=[A-Za-z0-9]{0,26}[A-Z])(?=[A-Za-z0-9]{0,26}[0-9])"
     r"[A-Za-z0-9]{21,27}+(?![A-Za-z0-9_])"),
)  # fmt: skip

# A token starts a word, also one glued to a name by - or _ (model-<token>.bin), or follows
# a URL escape such as %3D ("=") or %20 (" ").
TOKENS = re.compile(
    r"(?:(?<![A-Za-z0-9])|(?<=%[0-9A-Fa-f]{2}))(?:" + "|".join(p + b for _, p, b in SHAPES) + ")",
)
# Any token the rule set could find starts with one of these; the gate in redact.py uses it.
PREFIXES = "|".join(p for _, p, _ in SHAPES)
