"""RC-7: how an adapter tells a rejection that belongs to its route from one every route would give.

A 400 that says the prompt does not fit the model (context length, prompt too long, token limit),
or that this key cannot use this model, is the route's own: a route with a larger model or another
key may serve the same request. Each adapter declares its API's words for it (`RouteRejections`:
HTTP statuses, error codes, message patterns); `RouteRejections.owns` is the one matcher. A
rejection is only ever one of these when `errors.classify` sees it as permanent (a stream_options
or streaming-unsupported 400 keeps its own handling). Never imports an SDK, never decides policy.
"""

from __future__ import annotations

import re

from ..errors import ErrorKind, ProviderStreamError, aws_error_code, classify, error_text, status_of
from ..frozen import Frozen, set_field

__all__ = ["RouteRejections"]


def _code_of(error: BaseException) -> str:
    """The provider's error code an SDK exception or an in-stream error carries ("" if none):
    openai's `code`, botocore's `Error.Code`, google-genai's `status`, our stream error's `code`."""
    aws = aws_error_code(error)
    if aws:
        return aws.lower()
    for name in ("code", "status"):
        value = getattr(error, name, None)
        if isinstance(value, str):
            return value.lower()
    return ""


class RouteRejections(Frozen):
    """One API's words for a route-owned rejection (RC-7).

    `statuses`: the HTTP statuses it comes with (an in-stream error has none and is matched by
    code or words alone); `codes`: provider error codes that say it by themselves (lower case);
    `words`: what its message says, matched on the message and body; `coded_words`: (code,
    pattern) pairs where the code alone is too broad (Bedrock's `ValidationException`, Gemini's
    `INVALID_ARGUMENT`) and the message decides. A pattern given as text (its flags inline, as
    `(?i)`) is compiled at its first search, by `re`'s own cache: only a failed request reads it,
    so importing an adapter compiles none.
    """

    __slots__ = ("coded_words", "codes", "statuses", "words")
    statuses: frozenset[int]
    codes: frozenset[str]
    words: str | re.Pattern[str] | None
    coded_words: tuple[tuple[str, str | re.Pattern[str]], ...]

    def __init__(
        self,
        statuses: frozenset[int],
        codes: frozenset[str],
        words: str | re.Pattern[str] | None,
        coded_words: tuple[tuple[str, str | re.Pattern[str]], ...] = (),
    ) -> None:
        set_field(self, "statuses", statuses)
        set_field(self, "codes", codes)
        set_field(self, "words", words)
        set_field(self, "coded_words", coded_words)

    def owns(self, error: BaseException) -> bool:
        """Whether `error` is a rejection of this route's own (RC-7)."""
        if classify(error) is not ErrorKind.PERMANENT:
            return False
        status = status_of(error)
        if status is not None and status not in self.statuses:
            return False
        if status is None and not isinstance(error, ProviderStreamError) and not aws_error_code(error):
            return False  # neither an HTTP answer nor the provider's in-stream word: not the route's
        code = _code_of(error)
        if code in self.codes:
            return True
        text = error_text(error)
        for coded, pattern in self.coded_words:
            if code == coded and re.search(pattern, text):
                return True
        return self.words is not None and re.search(self.words, text) is not None
