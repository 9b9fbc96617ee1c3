"""The hosts layout's way out: an HTTPS proxy (HTTP CONNECT) on this machine's address on the lab's bridge.

The nodes of the hosts layout have no route and no name server beyond the lab's network, as a site's compute nodes
often have none; a site gives them a proxy, and so does the lab. It lets a node reach what this machine reaches
on port 443 (a package index, for a uv project's ``uv sync``), nothing else; lab.sh exports it to the jobs as
``HTTPS_PROXY`` (from ``<state>/etc/https_proxy``). ``python -m roach.lab.proxy ADDRESS PORT`` runs it.
"""

from __future__ import annotations

import asyncio
import sys

PORT = 3128  # on the bridge's address, which is each lab's own: no two labs' proxies share an address
ALLOWED_PORTS = {443}
_HEAD_LIMIT = 16384


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


async def _answer(writer: asyncio.StreamWriter, status: str) -> None:
    writer.write(f"HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n".encode())
    await writer.drain()
    writer.close()


async def _client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """One CONNECT host:443, then the bytes both ways until either side closes."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        writer.close()
        return
    method, _, rest = head.decode("latin-1").partition(" ")
    target = rest.split(" ", 1)[0]
    host, _, port = target.rpartition(":")
    if method != "CONNECT" or not host or not port.isdigit() or int(port) not in ALLOWED_PORTS:
        await _answer(writer, "403 Forbidden")
        return
    try:
        up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(host.strip("[]"), int(port)), 30)
    except (OSError, TimeoutError):
        await _answer(writer, "502 Bad Gateway")
        return
    writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
    await writer.drain()
    await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))


async def serve(address: str, port: int) -> None:
    server = await asyncio.start_server(_client, address, port, limit=_HEAD_LIMIT)
    print(f"roach lab proxy: CONNECT to port(s) {sorted(ALLOWED_PORTS)} on {address}:{port}", flush=True)
    async with server:
        await server.serve_forever()


def url(address: str) -> str:
    """What lab.sh exports as HTTPS_PROXY."""
    return f"http://{address}:{PORT}"


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1], int(sys.argv[2])))
