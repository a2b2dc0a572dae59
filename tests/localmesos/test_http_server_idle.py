"""An idle agent's HTTP server wakes up once a second, not ten times (2000 agents share one
process), still answers, and stops at once when asked."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request

from fastapi import FastAPI

from dl2_mesos.localmesos.http_app import SERVER_TICK_SECONDS, HttpServer


def test_an_idle_server_ticks_rarely_answers_and_stops_at_once():
    app = FastAPI()
    app.add_api_route("/ping", lambda: {"ok": True})

    async def scenario() -> tuple[int, dict, float]:
        server = HttpServer(app, "127.0.0.1")
        ticks = []
        on_tick = server.server.on_tick

        async def counting(counter: int) -> bool:
            ticks.append(counter)
            return await on_tick(counter)

        server.server.on_tick = counting  # type: ignore[method-assign]
        await server.start()
        await asyncio.sleep(1.5)
        url = f"http://127.0.0.1:{server.port}/ping"
        body = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=5).read())
        t0 = time.monotonic()
        await server.stop()


        return len(ticks), json.loads(body), time.monotonic() - t0

    ticks, body, stop_s = asyncio.run(scenario())
    assert body == {"ok": True}
    assert ticks <= 1.5 / SERVER_TICK_SECONDS + 2, ticks  # uvicorn's own loop ticks every 0.1 s: 15+
    assert stop_s < SERVER_TICK_SECONDS, stop_s  # woken, not left to finish its tick
