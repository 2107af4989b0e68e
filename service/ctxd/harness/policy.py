"""What the agent-harness hooks and the server share: the continue words and the dump budget.

Imports nothing, so a hook (which runs on every prompt) can read it for free.
"""

# The characters of dump a hook injects after the agent lost context.
HOOK_MAX_CHARS = 8000
# A prompt that is one of these (any case, trailing punctuation) means "carry on".
CONTINUE_WORDS = frozenset({"", "continue", "go on", "carry on", "keep going"})


def is_continue(prompt: str) -> bool:
    """An empty prompt or a bare "continue" (any case, trailing punctuation) means carry on."""
    return prompt.strip().lower().rstrip(".!…").strip() in CONTINUE_WORDS
