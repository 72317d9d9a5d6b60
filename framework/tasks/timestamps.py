"""Marathon's time format, used in the API and in stored records:
ISO 8601 UTC with milliseconds, `2015-09-25T15:13:48.343Z`."""
import calendar
import time
from typing import Optional


def format_timestamp(seconds: Optional[float] = None) -> str:
    """`seconds` since the epoch (now when None) in Marathon's format."""
    seconds = time.time() if seconds is None else seconds
    whole = int(seconds)
    millis = int(round((seconds - whole) * 1000))
    if millis == 1000:
        whole, millis = whole + 1, 0
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{millis:03d}Z"


def parse_timestamp(text: str) -> Optional[float]:
    """Seconds since the epoch of a timestamp in Marathon's format (fraction and
    `Z` optional); None when `text` is not one."""
    if not isinstance(text, str) or len(text) < 19:
        return None
    try:
        whole = calendar.timegm(time.strptime(text[:19], "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None
    rest = text[19:].removesuffix("Z")
    if not rest:
        return float(whole)
    if rest[0] != "." or not rest[1:].isdigit():
        return None
    return whole + float("0" + rest)
