"""Streams a ``multipart/form-data`` upload to a temp file, hashing and enforcing a size cap.

Starlette's own form parser spools the whole body before a route sees it, so a 10 GB upload would
fill the disk before a limit could be checked; this parser writes the ``file`` part to
``tmp_dir`` chunk by chunk and stops at the first byte over the limit. The client's filename is
kept only as text (a display name); the temp file's name is random.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header

from .core.errors import ApiError

# Non-file form fields are tiny (input shapes); cap them, all together, and their number, so they
# cannot be used to eat memory (3000 fields of 60 KB each were read before a 400).
MAX_FIELDS_BYTES = 64 * 1024
MAX_PARTS = 16
_MAX_HEADER_BYTES = 8 * 1024
# Multipart framing (boundaries, part headers) and the small fields around the file;
# Content-Length may exceed the file size by this much before the request is refused unread.
FRAMING_ALLOWANCE = 64 * 1024 + MAX_FIELDS_BYTES


@dataclass
class StreamedUpload:
    """The ``file`` part on disk (``path``, owned by the caller) plus the other text fields."""

    path: Path
    sha256: str
    size_bytes: int
    filename: str | None
    fields: dict[str, str] = field(default_factory=dict)

    def discard(self) -> None:
        self.path.unlink(missing_ok=True)


class _Collector:
    """``MultipartParser`` callbacks: file part → disk + sha256, other parts → ``fields``."""

    def __init__(self, out: BinaryIO, file_field: str, max_bytes: int) -> None:
        self.out = out
        self.file_field = file_field
        self.max_bytes = max_bytes
        self.hasher = hashlib.sha256()
        self.size = 0
        self.filename: str | None = None
        self.seen_file = False
        self.fields: dict[str, str] = {}
        self._header_name = b""
        self._header_value = b""
        self._disposition = b""
        self._name = ""
        self._is_file = False
        self._data = bytearray()
        self._parts = 0
        self._fields_bytes = 0

    def callbacks(self) -> dict:
        return {
            "on_part_begin": self.on_part_begin,
            "on_header_field": self.on_header_field,
            "on_header_value": self.on_header_value,
            "on_header_end": self.on_header_end,
            "on_headers_finished": self.on_headers_finished,
            "on_part_data": self.on_part_data,
            "on_part_end": self.on_part_end,
        }

    def on_part_begin(self) -> None:
        self._parts += 1
        if self._parts > MAX_PARTS:
            raise ApiError(400, "bad_multipart", f"more than {MAX_PARTS} form parts")
        self._disposition = b""
        self._data = bytearray()

    def on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._header_name += data[start:end]
        self._check_header()

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._header_value += data[start:end]
        self._check_header()

    def _check_header(self) -> None:
        if len(self._header_name) + len(self._header_value) > _MAX_HEADER_BYTES:
            raise ApiError(400, "bad_multipart", "a multipart part header is too long")

    def on_header_end(self) -> None:
        if self._header_name.lower() == b"content-disposition":
            self._disposition = self._header_value
        self._header_name = self._header_value = b""

    def on_headers_finished(self) -> None:
        _, options = parse_options_header(self._disposition)
        if b"name" not in options:
            raise ApiError(400, "bad_multipart", "a multipart part has no name")
        self._name = options[b"name"].decode("utf-8", "replace")
        self._is_file = self._name == self.file_field
        if self._is_file:
            if self.seen_file:
                raise ApiError(400, "bad_multipart", f"more than one {self.file_field!r} part")
            self.seen_file = True
            raw = options.get(b"filename")
            self.filename = raw.decode("utf-8", "replace") if raw is not None else None

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        chunk = data[start:end]
        if not self._is_file:
            self._fields_bytes += len(chunk)
            if self._fields_bytes > MAX_FIELDS_BYTES:
                raise ApiError(
                    413, "fields_too_large", f"form fields over {MAX_FIELDS_BYTES} bytes in all"
                )
            self._data.extend(chunk)
            return
        self.size += len(chunk)
        if self.size > self.max_bytes:
            raise upload_too_large(self.max_bytes)
        self.hasher.update(chunk)
        self.out.write(chunk)

    def on_part_end(self) -> None:
        if not self._is_file:
            self.fields[self._name] = self._data.decode("utf-8", "replace")


def upload_too_large(max_bytes: int) -> ApiError:
    return ApiError(413, "upload_too_large", f"the upload exceeds the limit of {max_bytes} bytes")


async def stream_upload(
    content_type: str | None,
    content_length: str | None,
    body: AsyncIterator[bytes],
    *,
    tmp_dir: Path,
    max_bytes: int,
    file_field: str = "file",
) -> StreamedUpload:
    """Parse ``body`` as multipart; write the ``file_field`` part under ``tmp_dir``.

    Raises ``ApiError``: 413 when the file (or a declared Content-Length) is over ``max_bytes``,
    400 for a body that is not multipart or lacks the file part. On error nothing is left on disk.
    """
    ctype, params = parse_options_header(content_type or "")
    if ctype != b"multipart/form-data" or b"boundary" not in params:
        raise ApiError(
            415, "unsupported_media_type", "send the model as multipart/form-data, field 'file'"
        )
    declared = int(content_length) if content_length and content_length.isdigit() else None
    if declared is not None and declared > max_bytes + FRAMING_ALLOWANCE:
        raise upload_too_large(max_bytes)
    tmp_dir.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix="upload-", suffix=".part", dir=tmp_dir)
    path = Path(name)
    try:
        with os.fdopen(fd, "wb") as out:
            collector = _Collector(out, file_field, max_bytes)
            parser = MultipartParser(params[b"boundary"], collector.callbacks())  # type: ignore[arg-type]
            async for chunk in body:
                parser.write(chunk)
            parser.finalize()
        if not collector.seen_file:
            raise ApiError(400, "missing_file", f"the form has no {file_field!r} file part")
    except FormParserError:
        path.unlink(missing_ok=True)
        raise ApiError(400, "bad_multipart", "the multipart body is malformed") from None
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return StreamedUpload(
        path=path,
        sha256=collector.hasher.hexdigest(),
        size_bytes=collector.size,
        filename=collector.filename,
        fields=collector.fields,
    )
