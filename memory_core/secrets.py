"""The secret values this process holds for its providers, and the one function that takes them
out of any text memory-core shows or keeps.

A provider's API key, its secret headers' values and a password in its base URL are sent with
every request; a provider or a proxy may echo them back in an error body ("Incorrect API key
provided: sk-..."), and that text would then reach the CLI's error line, the retry warnings, a
Prefect flow run's state, logs and artifacts, and the index's recorded ``provider_reason``.
Providers register their values here when they are built (:func:`remember`); the errors every
provider failure becomes (:class:`memory_core.errors.ProviderError`,
:class:`memory_core.embeddings.retry.Retryable`) pass their message through :func:`scrub`, and so
do the places that show an error or keep a reason. A password in any URL (``//user:pw@host``) is
masked whether or not it was registered.
"""

from __future__ import annotations

import re
import threading
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

MASK = "***"
MIN_LEN = 6  # shorter values are not masked: "abc" would mask parts of ordinary words

_lock = threading.Lock()
_known: set[str] = set()
_ordered: tuple[str, ...] = ()  # longest first: a key that contains another is masked whole

_URL_PASSWORD = re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@]*:)(?P<pw>[^\s/@]+)(?=@)")


def remember(*values: str | None) -> None:
    """Register secret values (an API key, a secret header's value, a URL's password)."""
    global _ordered
    new = {v.strip() for v in values if isinstance(v, str) and len(v.strip()) >= MIN_LEN}
    if not new - _known:
        return
    with _lock:
        _known.update(new)
        _ordered = tuple(sorted(_known, key=len, reverse=True))


def url_password(url: str | None) -> str | None:
    """The password of ``scheme://user:password@host/...``, or None."""
    if not url:
        return None
    try:
        return urlsplit(url).password
    except ValueError:
        return None


def url_credentials(url: str | None) -> list[str]:
    """What a URL's user part lets out, to :func:`remember`: its password, or a user name given
    with no password (``https://<token>@host``: a token), each also as the HTTP Basic credential
    built from it (base64 of ``user:password``), which a proxy echoing the request's headers shows
    (the fortieth session's audit I: L1, L2)."""
    if not url:
        return []
    try:
        parts = urlsplit(url)
        user, password = parts.username, parts.password
    except ValueError:
        return []
    if password is None and not user:
        return []
    import base64
    from urllib.parse import unquote

    secret = password if password is not None else user
    raw_user, raw_password = unquote(user or ""), unquote(password or "")
    basic = base64.b64encode(f"{raw_user}:{raw_password}".encode()).decode("ascii")
    return list(dict.fromkeys(v for v in (secret, unquote(secret or ""), basic) if v))


# a query parameter that carries a credential (Azure's ``?api-key=``, ``?key=``, ``?token=``, a SAS's ``sig=``)
_SECRET_PARAM = re.compile(r"(?i)(?:key|token|secret|sig|signature|passw|pwd|auth|credential|^code$)")


def credential_param(name: str) -> bool:
    """Whether a URL query parameter named ``name`` carries a credential (:data:`_SECRET_PARAM`):
    the one rule that says what of a URL's query is masked, registered and left out of the
    provider key."""
    return _SECRET_PARAM.search(name) is not None


def url_query_secrets(url: str | None) -> list[str]:
    """The values of ``url``'s query parameters whose names say they hold a credential."""
    if not url or "?" not in url:
        return []
    try:
        pairs = parse_qsl(urlsplit(url).query, keep_blank_values=False)
    except ValueError:
        return []
    return [v for k, v in pairs if credential_param(k) and v]


def url_without_password(url: str | None) -> str | None:
    """``url`` with its password (if any; a user name given alone, as a token is) and its credential
    query values (``?api-key=...``: the thirty-eighth session's audit found one recorded whole in
    the index) replaced by ``***``: what may be recorded or shown."""
    if not url:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if url_password(url) is not None:
        user = parts.username or ""
        host = parts.netloc.rsplit("@", 1)[1]
        parts = parts._replace(netloc=f"{user}:{MASK}@{host}")
    elif "@" in parts.netloc:  # a user name alone is a token (https://<token>@host)
        parts = parts._replace(netloc=f"{MASK}@{parts.netloc.rsplit('@', 1)[1]}")
    if url_query_secrets(url):
        pairs = parse_qsl(parts.query, keep_blank_values=True)
        parts = parts._replace(query=urlencode(
            [(k, MASK if v and credential_param(k) else v) for k, v in pairs], safe="*"))
    return urlunsplit(parts)


def url_without_credentials(url: str | None) -> str | None:
    """``url`` as it names a server, with no credential in it: its user part left out whole (a
    user name and its password, or a token given as the user name: :func:`url_credentials`), and
    the value of every credential query parameter (:func:`credential_param`: ``?code=``,
    ``?api-key=``, ``?sig=``) ``***``. Scheme, host, port, path and every other query parameter
    are kept as they are. What the provider key hashes
    (:func:`memory_core.embeddings.base.compute_provider_key`): a credential rotated in the URL is
    the same configuration, a different host or path is not. A URL with no credential (or one
    that cannot be parsed) is returned as it is."""
    if not url:
        return url
    try:
        parts = urlsplit(url)
        pairs = parse_qsl(parts.query, keep_blank_values=True) if parts.query else []
    except ValueError:
        return url
    secret_query = any(credential_param(k) for k, _ in pairs)
    if "@" not in parts.netloc and not secret_query:
        return url
    if "@" in parts.netloc:
        parts = parts._replace(netloc=parts.netloc.rsplit("@", 1)[1])
    if secret_query:
        parts = parts._replace(query=urlencode([(k, MASK if credential_param(k) else v) for k, v in pairs],
                                               safe="*"))
    return urlunsplit(parts)


def scrub(text: str) -> str:
    """``text`` with every registered secret value and every URL password masked."""
    if not text:
        return text
    for value in _ordered:
        if value in text:
            text = text.replace(value, MASK)
    if "@" in text and "://" in text:
        text = _URL_PASSWORD.sub(lambda m: m.group("head") + MASK, text)
    return text


def forget() -> None:
    """Forget every registered value (tests)."""
    global _ordered
    with _lock:
        _known.clear()
        _ordered = ()
