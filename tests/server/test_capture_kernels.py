"""Server-wide capture: with it on, a kernel the real Jupyter server starts (``POST
/api/kernels``) loads nbmemory at start and its cells reach the server's memory with no
``%load_ext``; the sidebar's ``GET /nbmemory/capture`` lists it; off again, a new kernel is left
alone. Real server, real kernels, the server's own memory."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.server.test_handlers import call, payload
from tests.server.test_live import eventually

pytestmark = pytest.mark.integration


async def start_kernel(jp_fetch: Any, jp_serverapp: Any) -> tuple[str, Any]:
    response = await jp_fetch("api", "kernels", method="POST", body=json.dumps({"name": "python3"}))
    kernel_id = json.loads(response.body)["id"]
    client = jp_serverapp.kernel_manager.get_kernel(kernel_id).client()
    client.start_channels()
    await client.wait_for_ready(timeout=120)
    return kernel_id, client


async def run(client: Any, code: str) -> str:
    """What ``code`` printed in the kernel (its error's text when it raised)."""
    printed: list[str] = []

    def output(message: dict[str, Any]) -> None:
        content = message["content"]
        if message["msg_type"] == "stream":
            printed.append(content["text"])
        elif message["msg_type"] == "error":
            printed.append(f"{content['ename']}: {content['evalue']}")

    await client.execute_interactive(code, output_hook=output, timeout=120)
    return "".join(printed)


async def test_kernels_started_while_server_wide_capture_is_on_capture_into_the_servers_memory(
    jp_fetch: Any, jp_serverapp: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The suite turns capture off everywhere; the kernels inherit the server's environment.
    monkeypatch.setenv("NBMEMORY_CAPTURE", "1")
    state = await call(jp_fetch, "GET", "capture")
    assert state.code == 200
    assert payload(state) == {"server_wide": False, "env_off": False, "kernels": []}
    bad = await call(jp_fetch, "PUT", "capture", body={"server_wide": "yes"})
    assert bad.code == 400 and b"server_wide must be true or false" in bad.body
    on = payload(await call(jp_fetch, "PUT", "capture", body={"server_wide": True}))
    assert on["server_wide"] is True

    kernel_id, client = await start_kernel(jp_fetch, jp_serverapp)
    try:
        # Loaded at start: the magics are there without %load_ext.
        assert "MemoryMagics" in await run(
            client, "print(type(get_ipython().magics_manager.registry['MemoryMagics']).__name__)"
        )
        assert "ValueError: quillfrond-serverwide failed" in await run(
            client, "raise ValueError('quillfrond-serverwide failed')"
        )

        async def captured() -> list[dict[str, Any]]:
            found = payload(
                await call(jp_fetch, "GET", "search", q="quillfrond-serverwide", k="5", kind="execution")
            )
            return [h for h in found["hits"] if "quillfrond-serverwide" in h["snippet"]]

        [hit] = await eventually(captured, "the failed cell is found in the server's memory", timeout=60)
        assert hit["kind"] == "execution" and hit["event_at"]

        async def listed() -> list[dict[str, Any]]:
            kernels = payload(await call(jp_fetch, "GET", "capture"))["kernels"]
            return [k for k in kernels if k["kernel_id"] == kernel_id and k["runs"] >= 1]

        [kernel] = await eventually(listed, "the kernel is listed as capturing", timeout=30)
        assert kernel["pid"] > 0 and kernel["since"]
    finally:
        client.stop_channels()

    off = payload(await call(jp_fetch, "PUT", "capture", body={"server_wide": False}))
    assert off["server_wide"] is False
    other_id, other = await start_kernel(jp_fetch, jp_serverapp)
    try:
        assert await run(other, "import sys; print('nbmemory.jupyter.magics' in sys.modules)") == "False\n"
        kernels = payload(await call(jp_fetch, "GET", "capture"))["kernels"]
        assert other_id not in [k["kernel_id"] for k in kernels]
    finally:
        other.stop_channels()
