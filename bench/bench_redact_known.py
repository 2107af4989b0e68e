"""Cost of redaction with known values: 1 MB of log text, 0 / 50 / 500 remembered secrets, and
after a restart, while 50 / 500 values are recognised only by their stored digests."""

import secrets
import statistics
import tempfile
import time
from pathlib import Path

from ctxd import redact
from ctxd.redact import known as redact_known
from ctxd.redact import learned as redact_learned

LINE = "2025-01-01 12:00:00 INFO step=1200 loss=0.3132 lr: 1e-4 tokens/s=5321 worker=3\n"
TEXT = LINE * (1_000_000 // len(LINE))
# The digest scan's worst case: every line has a word as long as a stored value's form.
ID_LINE = "2025-01-01 12:00:00 INFO req={} path=/v1/chat/completions status=200\n"
IDS_TEXT = "".join(ID_LINE.format(secrets.token_urlsafe(24)) for _ in range(12_000))


def median_ms(runs: int = 5, text: str = TEXT) -> float:
    times = []
    for _ in range(runs):
        redact._text_short.cache_clear()
        started = time.perf_counter()
        redact.text(text)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def short_us() -> float:
    """Microseconds to redact one argv-sized string, uncached."""
    short = "python serve.py --model m --port 8000 --tp 8"
    started = time.perf_counter()
    for i in range(10_000):
        redact._text(short + str(i))
    return (time.perf_counter() - started) * 100


def main() -> None:
    for count in (0, 50, 500):
        redact_known.forget_all()
        for _ in range(count):
            redact.learn(secrets.token_urlsafe(24))
        print(f"1 MB log, {count:3d} known values: median {median_ms():7.1f} ms")
        ids = median_ms(text=IDS_TEXT)
        print(f"1 MB log of request ids, {count:3d} known values: median {ids:7.1f} ms")
        print(f"  one argv string: {short_us():.1f} µs")
    with tempfile.TemporaryDirectory() as data:
        for count in (50, 500):
            redact_known.forget_all()
            redact_learned.forget_all()
            redact_learned.load(Path(data))
            for _ in range(count):
                redact.learn(secrets.token_urlsafe(24))
            redact_known.forget_all()  # a restart: only the digests remain
            redact_learned.load(Path(data))
            print(f"1 MB log, {count:3d} values by digest: median {median_ms():7.1f} ms")
            ids = median_ms(text=IDS_TEXT)
            print(f"1 MB log of request ids, {count:3d} values by digest: median {ids:7.1f} ms")
            print(f"  one argv string: {short_us():.1f} µs")
        redact_learned.forget_all()


if __name__ == "__main__":
    main()
