"""The perfmodel's user-error type (bad widths, bad rank counts, missing files). Pure."""
from __future__ import annotations


class PerfModelError(ValueError):
    """An input the user can fix. The CLI prints it as one line and exits with status 2.

    Messages say what was expected and what was found, and name the file where that applies.
    """
