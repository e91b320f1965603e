"""Numba kernels of the text edge reader (:class:`shardgnn.io.readers.TextSource`). Rank-local.

Kept apart from :mod:`shardgnn.io.readers` so that importing the readers (e.g. for
:func:`~shardgnn.io.readers.npy_header`) does not import numba (~0.2 s of CPU per process).
"""
from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _is_sep(c: int) -> bool:
    return c == 32 or c == 9 or c == 44 or c == 13 or c == 59


@njit(cache=True)
def _sign(buf, i, n):  # pragma: no cover - numba
    """(negative, index past an optional '+' or '-' at ``buf[i]``)."""
    if i < n and (buf[i] == 45 or buf[i] == 43):
        return buf[i] == 45, i + 1
    return False, i


@njit(cache=True)
def _parse_float(buf, i, n):  # pragma: no cover - numba
    """Parse a decimal number (sign, digits, '.', digits, exponent) at ``buf[i]``.

    Returns (value, next index, ok); ``ok`` is False for anything else (nan, inf, text).
    """
    neg, i = _sign(buf, i, n)
    mant = 0.0
    nd = 0
    while i < n and 48 <= buf[i] <= 57:
        mant = mant * 10.0 + (buf[i] - 48)
        nd += 1
        i += 1
    scale = 0
    if i < n and buf[i] == 46:
        i += 1
        while i < n and 48 <= buf[i] <= 57:
            mant = mant * 10.0 + (buf[i] - 48)
            scale -= 1
            nd += 1
            i += 1
    if nd == 0:
        return 0.0, i, False
    if i < n and (buf[i] == 101 or buf[i] == 69):
        i += 1
        eneg, i = _sign(buf, i, n)
        ev = 0
        ne = 0
        while i < n and 48 <= buf[i] <= 57:
            ev = min(ev * 10 + (buf[i] - 48), 10000)
            ne += 1
            i += 1
        if ne == 0:
            return 0.0, i, False
        scale += -ev if eneg else ev
    val = mant * 10.0 ** scale if scale >= -300 else (mant * 10.0 ** (scale + 300)) * 1e-300
    return (-val if neg else val), i, True


@njit(cache=True)
def parse_block(buf, nparse, ncols, out, lines, line0, wcol, wout):  # pragma: no cover - numba
    """Parse complete text lines of integers (columns < nparse) and one decimal column ``wcol``
    (the edge weight, into ``wout``; -1: none).

    Returns (rows, last_line, ncols, err, err_line, err_val). err: 0 ok, 1 column count,
    2 negative id, 3 non-integer, 4 integer too large, 5 fewer than 2 columns, 6 a weight that
    is not a finite decimal number.
    """
    n = buf.shape[0]
    i = 0
    row = 0
    line = line0
    while i < n:
        line += 1
        while i < n and (buf[i] == 32 or buf[i] == 9):
            i += 1
        if i >= n:
            break
        c = buf[i]
        if c == 35 or c == 37 or c == 10 or c == 13:
            while i < n and buf[i] != 10:
                i += 1
            i += 1
            continue
        col = 0
        while True:
            if col < nparse:
                if buf[i] == 45:
                    if i + 1 < n and 48 <= buf[i + 1] <= 57:
                        return row, line, ncols, 2, line, col
                    return row, line, ncols, 3, line, col
                if buf[i] == 43:
                    i += 1
                v = 0
                nd = 0
                while i < n and 48 <= buf[i] <= 57:
                    v = v * 10 + (buf[i] - 48)
                    nd += 1
                    i += 1
                if nd == 0 or (i < n and not _is_sep(buf[i]) and buf[i] != 10):
                    return row, line, ncols, 3, line, col
                if nd > 18:
                    return row, line, ncols, 4, line, col
                out[row, col] = v
            elif col == wcol:
                w, i, ok = _parse_float(buf, i, n)
                if not ok or (i < n and not _is_sep(buf[i]) and buf[i] != 10) or \
                        not np.isfinite(w) or abs(w) > 3.4e38:
                    return row, line, ncols, 6, line, col
                wout[row] = w
            else:
                while i < n and not _is_sep(buf[i]) and buf[i] != 10:
                    i += 1
            col += 1
            while i < n and _is_sep(buf[i]):
                i += 1
            if i >= n or buf[i] == 10:
                break
        i += 1
        if ncols == 0:
            if col < 2:
                return row, line, ncols, 5, line, col
            ncols = col
        elif col != ncols:
            return row, line, ncols, 1, line, col
        lines[row] = line
        row += 1
    return row, line, ncols, 0, 0, 0
