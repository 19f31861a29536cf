"""User-facing errors: one line that names the problem, never a traceback."""


def error_line(exc: BaseException) -> str:
    """The line of an exception that says what went wrong: TVM's messages end with it, after
    their traceback; the exception's type when it says nothing."""
    text = str(exc).strip()
    return text.splitlines()[-1] if text else type(exc).__name__


class ConvtuneError(Exception):
    """A problem with the user's input or environment, reported as one line.

    ``exit_code`` is what the CLI exits with; ``http_status`` what the service answers.
    """

    exit_code = 2
    http_status = 400

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidModelError(ConvtuneError):
    """The bytes are not a usable ONNX model (not ONNX, external data, bad dtype, dynamic shape)."""


class UnsupportedOpError(ConvtuneError):
    """The model holds an op the TVM frontend cannot convert, or TVM cannot compile it.

    A well-formed model the service cannot process: 422, not a client's malformed request.
    """

    http_status = 422


class VerificationError(ConvtuneError):
    """A built artifact disagrees with onnxruntime; it must not be served."""

    exit_code = 3
