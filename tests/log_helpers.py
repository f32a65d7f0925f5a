"""Log capture for tests: the repository runs pytest with its logging plugin (and so ``caplog``) disabled."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextmanager
def warnings_of(logger_name: str) -> Iterator[list[str]]:
    """The messages of the warnings (and worse) that ``logger_name`` logs inside the block."""
    logger, handler = logging.getLogger(logger_name), _Collect()
    logger.addHandler(handler)
    try:
        yield handler.messages
    finally:
        logger.removeHandler(handler)
