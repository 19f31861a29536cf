"""User-facing errors: one line that names the problem, never a traceback."""


class ConvtuneError(Exception):
    """A problem with the user's input or environment, reported as one line.

    ``exit_code`` is what the CLI exits with; the service maps the same errors to 4xx responses.
    """

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidModelError(ConvtuneError):
    """The bytes are not a usable ONNX model (not ONNX, external data, bad dtype, dynamic shape)."""


class UnsupportedOpError(ConvtuneError):
    """The model holds an op the TVM frontend cannot convert."""


class VerificationError(ConvtuneError):
    """A built artifact disagrees with onnxruntime; it must not be served."""

    exit_code = 3
