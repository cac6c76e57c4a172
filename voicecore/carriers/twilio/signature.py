"""Twilio request signatures (X-Twilio-Signature): HMAC-SHA1 over the URL plus the sorted POST params.

Owns only the arithmetic; it knows nothing of HTTP servers. The algorithm is Twilio's documented one,
checked in tests against the `twilio` package's RequestValidator.
"""

import base64
import hashlib
import hmac
from collections.abc import Mapping


def compute_signature(auth_token: str, url: str, params: Mapping[str, str] | None = None) -> str:
    """Return the base64 signature Twilio sends for a request to ``url`` with form ``params``."""
    message = url
    for key in sorted(params or {}):
        message += key + params[key]
    digest = hmac.new(auth_token.encode(), message.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def signature_is_valid(auth_token: str, url: str, params: Mapping[str, str] | None, signature: str) -> bool:
    """Constant-time check of ``signature`` for ``url`` and ``params``."""
    if not signature:
        return False
    expected = compute_signature(auth_token, url, params)
    return hmac.compare_digest(expected.encode(), signature.encode())
