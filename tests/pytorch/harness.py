"""Shared checks for the PyTorch tests: each check prints one line, and finish() prints the
closing "N passed, M failed" line and exits non-zero if any check failed."""
import sys

_passed = 0
_failed = 0


def check(condition, what, detail=""):
    global _passed, _failed
    if condition:
        _passed += 1
    else:
        _failed += 1
    print("%s %s%s" % ("ok  " if condition else "FAIL", what, (": " + str(detail)) if detail else ""),
          flush=True)
    return condition


def finish():
    print("%d passed, %d failed" % (_passed, _failed), flush=True)
    sys.exit(1 if _failed else 0)


def parse_bytes(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip()
    if text and text[-1].upper() in units:
        return int(text[:-1]) * units[text[-1].upper()]
    return int(text)
