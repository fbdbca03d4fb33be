"""Uploads: how much may be stored, under which name, and who removes it.

Gradio's upload route stores a file before any event names it, under <cache>/<content hash>/<name>:
identical uploads share one path, and the request carries no session. So the gate in front of that
route bounds what it takes in total (uploads stored and in flight, UPLOADS_TOTAL) and per request,
refusing past either in words; a stored upload goes UPLOAD_AGE_S after it was sent or last claimed. An
event that reads an upload first claims it: a hard link under a name of the session's own,
<cache>/mulo/uploads/<session>/<content hash>.json, counted against what that session may claim per
window (SESSION_BYTES per SESSION_WINDOW_S; a direct caller, with no session, is not counted). The
session that owns a claimed copy removes it once read, or when it ends; the shared route file is never
removed by an event, so every session that uploaded the same bytes can still claim them (app.files
sweeps it). Knows nothing of traces.
"""
from __future__ import annotations

import asyncio
import hashlib
import os
import re
import secrets
import shutil
import threading
import time
from collections import OrderedDict, deque
from pathlib import Path

from core.trace import MAX_BYTES

from . import files
from .files import UPLOAD_AGE_S

UPLOADS_TOTAL = int(os.environ.get("MULO_UPLOADS_MIB", "256")) * 2 ** 20   # stored and in flight, all uploads
REQUEST_MOST = MAX_BYTES + 2 ** 16        # one upload request: a file at the trace limit and its form fields
SESSION_BYTES = 4 * MAX_BYTES             # what one session may claim per window
SESSION_WINDOW_S = 600
SESSIONS_KEPT = 1024                      # sessions whose recent claims are remembered (the oldest go first)
SESSION = re.compile(r"[A-Za-z0-9_-]{1,64}")


class UploadError(ValueError):
    """An upload that may not be stored or claimed; the message says which bound."""


def _mib(n: float) -> str:
    return f"{n / 2 ** 20:.1f} MiB"


def claimed_folder() -> Path:
    return files.cache_folder() / "mulo" / "uploads"


def stored_bytes() -> int:
    """Bytes of the uploads on disk: the route's files (the cache folder outside the app's own files)
    and the claimed copies, each inode once (a claim is a hard link to the route's file)."""
    root, seen, total = files.cache_folder(), set(), 0
    for folder, dirs, names in os.walk(root):
        if Path(folder) == root / "mulo":
            dirs[:] = [d for d in dirs if d == "uploads"]
            continue
        for name in names:
            try:
                st = os.lstat(os.path.join(folder, name))
            except FileNotFoundError:
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    return total


class Gate:
    """ASGI middleware before Gradio's upload route: a request must give its length, at most
    REQUEST_MOST, and fit, with the uploads stored and those in flight, under UPLOADS_TOTAL; it is
    refused otherwise (411, 413, 429) with a message that names the bound."""

    def __init__(self, app):
        self.app = app
        self.in_flight = 0
        self.lock = asyncio.Lock()

    async def __call__(self, scope, receive, send):
        if not (scope["type"] == "http" and scope["method"] == "POST"
                and scope["path"].rstrip("/").endswith("/gradio_api/upload")):
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length", b"")
        size = int(length) if length.isdigit() else None
        why = await self._reserve(size)
        if why:
            return await _refuse(send, *why)
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= size

    async def _reserve(self, size: int | None) -> tuple[int, str] | None:
        if size is None:
            return 411, "upload refused: the request must give its Content-Length"
        if size > REQUEST_MOST:
            return 413, f"upload refused: {_mib(size)} in one request; at most {MAX_BYTES // 2 ** 20} MiB"
        async with self.lock:
            held = await asyncio.to_thread(stored_bytes) + self.in_flight
            if held + size > UPLOADS_TOTAL:
                return 429, (f"upload refused: the server's uploads would pass {UPLOADS_TOTAL // 2 ** 20} MiB "
                             f"({_mib(held)} stored or arriving; each goes {UPLOAD_AGE_S} s after it was sent or "
                             "last replayed): try again shortly")
            self.in_flight += size
        return None


async def _refuse(send, status: int, message: str) -> None:
    body = message.encode()
    await send(dict(type="http.response.start", status=status,
                    headers=[(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]))
    await send(dict(type="http.response.body", body=body))


_lock = threading.Lock()
_claims: OrderedDict = OrderedDict()   # session -> deque of (epoch s, bytes) claimed within SESSION_WINDOW_S


def _owner(path: Path) -> str | None:
    """The session a claimed copy belongs to, or None for a path outside the claimed folder."""
    try:
        rel = path.resolve().relative_to(claimed_folder().resolve())
    except ValueError:
        return None
    return rel.parts[0] if len(rel.parts) == 2 else ""


def claim(path: str, session: str | None) -> Path:
    """The session's own copy of an upload (a path in the cache folder), to read and then `release`.
    UploadError names why not: the file is gone, another session's copy, or past what this session may
    claim per window."""
    counted = bool(session and SESSION.fullmatch(session))
    session = session if counted else "local"
    src = Path(path)
    owner = _owner(src)
    if owner is not None and owner != session:
        raise UploadError("it is another session's upload; upload the file from this page")
    if not src.is_file():
        raise UploadError(f"the uploaded file is gone (an upload no event replays is kept {UPLOAD_AGE_S} s): "
                          "upload it again")
    if owner == session:
        return src
    if counted:
        _count(session, src.stat().st_size)
    digest = hashlib.sha256()
    with open(src, "rb") as f:
        for chunk in iter(lambda: f.read(2 ** 20), b""):
            digest.update(chunk)
    own = claimed_folder() / session / f"{digest.hexdigest()[:32]}-{secrets.token_hex(4)}.json"
    own.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, own)
    except OSError:                  # another file system, or one without hard links
        shutil.copyfile(src, own)
    return own


def _count(session: str, size: int) -> None:
    """Count a claim of `size` bytes against the session's window, or refuse it."""
    now = time.time()
    with _lock:
        recent = _claims.setdefault(session, deque())
        _claims.move_to_end(session)
        while recent and now - recent[0][0] > SESSION_WINDOW_S:
            recent.popleft()
        used = sum(n for _, n in recent)
        if used + size > SESSION_BYTES:
            raise UploadError(f"this session replayed {_mib(used)} of uploads in the last {SESSION_WINDOW_S // 60} "
                              f"minutes; at most {SESSION_BYTES // 2 ** 20} MiB: try again later")
        recent.append((now, size))
        while len(_claims) > SESSIONS_KEPT:
            _claims.popitem(last=False)


def release(path: Path, session: str | None) -> None:
    """Remove a claimed copy, when `session` owns it; anything else stays."""
    session = session if session and SESSION.fullmatch(session) else "local"
    if _owner(path) == session:
        path.unlink(missing_ok=True)


def forget(session: str | None) -> None:
    """A session ended: its claimed copies and its count of claims go."""
    if session and SESSION.fullmatch(session):
        shutil.rmtree(claimed_folder() / session, ignore_errors=True)
        with _lock:
            _claims.pop(session, None)
