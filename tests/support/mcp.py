"""An MCP client for the tests, over the `mcp` package's own stdio client: `python -m roach mcp` as a subprocess.

The client's session lives in one task on an event loop of its own thread (anyio's scopes must be left by the
task that entered them), and the synchronous tests hand it calls one at a time.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

REPO = Path(__file__).resolve().parents[2]


class Agent:
    """``with Agent(...) as a: a.call("status", ref=...)``: one server and one session for the block."""

    def __init__(self, *server_args: str, env: dict[str, str] | None = None):
        self.params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "roach", "mcp", *server_args],
            # everything the test process has ($ROACH_STORE, $ROACH_LAB_DIR, $ROACH_CLUSTERS_TOML), this tree first
            env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
            cwd=str(REPO),
        )
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.queue: asyncio.Queue[tuple[str, Any, concurrent.futures.Future[Any]] | None] | None = None
        self.ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self.done: concurrent.futures.Future[Any] | None = None

    async def _serve(self) -> None:
        self.queue = asyncio.Queue()
        try:
            async with stdio_client(self.params) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                self.ready.set_result(None)
                while (item := await self.queue.get()) is not None:
                    what, arg, fut = item
                    try:
                        if what == "list":
                            fut.set_result(await session.list_tools())
                        elif what == "read":
                            fut.set_result(await session.read_resource(arg))
                        else:
                            fut.set_result(await session.call_tool(*arg))
                    except Exception as e:  # the test sees it where it called
                        fut.set_exception(e)
        except Exception as e:
            if not self.ready.done():
                self.ready.set_exception(e)
            raise

    def __enter__(self) -> Agent:
        self.thread.start()
        self.done = asyncio.run_coroutine_threadsafe(self._serve(), self.loop)
        self.ready.result(timeout=60)
        return self

    def _ask(self, what: str, arg: Any, timeout: float) -> Any:
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        assert self.queue is not None
        self.loop.call_soon_threadsafe(self.queue.put_nowait, (what, arg, fut))
        return fut.result(timeout=timeout)

    def tools(self) -> dict[str, Any]:
        return {t.name: t for t in self._ask("list", None, 60).tools}

    def resource(self, uri: str) -> str:
        return "".join(getattr(c, "text", "") for c in self._ask("read", uri, 60).contents)

    def result(self, tool: str, timeout: float = 300, **args: Any) -> tuple[bool, str]:
        """(is_error, text) of one call."""
        r = self._ask("call", (tool, args), timeout)
        return bool(r.is_error), "".join(c.text for c in r.content if getattr(c, "text", None) is not None)

    def call(self, tool: str, timeout: float = 300, **args: Any) -> Any:
        """A call that must succeed: its JSON."""
        is_error, text = self.result(tool, timeout, **args)
        assert not is_error, f"{tool}({args}) failed: {text}"
        return json.loads(text)

    def refused(self, tool: str, **args: Any) -> str:
        """A call that must be refused: its text."""
        is_error, text = self.result(tool, **args)
        assert is_error, f"{tool}({args}) was not refused: {text}"
        return text

    def __exit__(self, *exc: object) -> None:
        assert self.queue is not None and self.done is not None
        self.loop.call_soon_threadsafe(self.queue.put_nowait, None)
        try:
            self.done.result(timeout=30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=10)
