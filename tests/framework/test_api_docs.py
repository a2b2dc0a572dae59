"""``/docs`` works without internet (Swagger UI from the installed package), and the OpenAPI document
declares the bearer scheme and typed answers; checked in headless Chromium with every non-local
request blocked (screenshot in runs/test-artifacts/api-docs.png)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import uvicorn

from dl2_mesos.framework.api import create_app
from dl2_mesos.framework.api_docs import SCHEMAS
from dl2_mesos.services.zookeeper import free_port

from .test_api import AUTH, CoreBackend, client  # noqa: F401 (the API-on-a-real-core fixture)
from .conftest import Harness


def test_docs_page_uses_local_assets_only(client):  # noqa: F811
    c, _ = client
    page = c.get("/docs")
    assert page.status_code == 200
    assert "/docs-assets/swagger-ui-bundle.js" in page.text and "/docs-assets/swagger-ui.css" in page.text
    assert "cdn." not in page.text and "https://" not in page.text.replace("https://fastapi", "")
    js = c.get("/docs-assets/swagger-ui-bundle.js")
    assert js.status_code == 200 and "SwaggerUIBundle" in js.text[:2000] and len(js.content) > 500_000
    assert c.get("/docs-assets/swagger-ui.css").status_code == 200
    assert c.get("/docs-assets/../api.py").status_code == 404
    assert c.get("/redoc").status_code == 404  # ReDoc would need a CDN


def test_openapi_declares_bearer_and_typed_answers(client):  # noqa: F811
    c, _ = client
    doc = c.get("/openapi.json").json()
    assert doc["components"]["securitySchemes"]["bearerAuth"] == {
        "type": "http",
        "scheme": "bearer",
        "description": doc["components"]["securitySchemes"]["bearerAuth"]["description"],
    }
    paths = doc["paths"]
    for path, ops in paths.items():
        for method, op in ops.items():
            if path.startswith("/api/v1/"):
                assert op["security"] == [{"bearerAuth": []}], (path, method)
                assert op["responses"]["401"]["content"]["application/json"]["schema"]["$ref"].endswith(
                    "/Error"
                )

    def schema_of(path: str, method: str, status: str) -> str:
        return paths[path][method]["responses"][status]["content"]["application/json"]["schema"]["$ref"]

    assert schema_of("/api/v1/jobs", "get", "200").endswith("/JobList")
    assert schema_of("/api/v1/jobs", "post", "201").endswith("/Job")
    assert schema_of("/api/v1/jobs/{job_id}", "get", "200").endswith("/Job")
    assert schema_of("/api/v1/jobs/{job_id}", "delete", "409").endswith("/Error")
    assert schema_of("/health", "get", "200").endswith("/Health")


def test_the_schemas_name_every_field_the_api_answers(client):  # noqa: F811
    c, _ = client
    job = c.post("/api/v1/jobs", json={"job_type": "resnet-50", "epochs": 3}, headers=AUTH).json()
    brief = SCHEMAS["JobBrief"]["properties"]
    full = {**brief, **SCHEMAS["Job"]["allOf"][1]["properties"]}
    assert set(job) <= set(full), set(job) - set(full)
    listed = c.get("/api/v1/jobs", headers=AUTH).json()
    assert set(listed) <= set(SCHEMAS["JobList"]["properties"])
    assert set(listed["jobs"][0]) <= set(brief), set(listed["jobs"][0]) - set(brief)
    assert set(c.get("/health").json()) <= set(SCHEMAS["Health"]["properties"])
    for task in job["tasks"]:
        assert set(task) <= set(SCHEMAS["Job"]["allOf"][1]["properties"]["tasks"]["items"]["properties"])


def test_docs_render_offline_in_headless_chromium():
    from ..demo.test_demo import ARTIFACTS, CHROMIUM

    if not Path(CHROMIUM).exists():
        pytest.fail("chromium is not installed: run `bash scripts/install_services.sh` (CI does)")
    from playwright.sync_api import sync_playwright

    h = Harness()
    h.register()
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(CoreBackend(h), api_token="s3cret"),
            host="127.0.0.1",
            port=port,
            log_level="warning",
            lifespan="off",
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        for _ in range(100):
            if server.started:
                break
            time.sleep(0.05)
        blocked: list[str] = []
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 1000})

                def only_local(route):  # the machine has no internet: make any attempt fail and visible
                    if route.request.url.startswith(f"http://127.0.0.1:{port}/"):
                        return route.continue_()
                    blocked.append(route.request.url)
                    return route.abort()

                page.route("**/*", only_local)
                page.goto(f"http://127.0.0.1:{port}/docs", wait_until="load", timeout=30_000)
                page.wait_for_selector(".opblock", timeout=20_000)
                text = page.inner_text("body")
                ARTIFACTS.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(ARTIFACTS / "api-docs.png"), full_page=True)
            finally:
                browser.close()
        assert "/api/v1/jobs" in text and "Authorize" in text and "JobList" in text
        assert blocked == []
    finally:
        server.should_exit = True
        thread.join(10)


def test_without_the_assets_package_the_api_runs_and_docs_say_what_to_install(monkeypatch):
    import builtins

    from fastapi.testclient import TestClient

    real_import = builtins.__import__

    def no_offline(name, *args, **kwargs):
        if name == "fastapi_offline":
            raise ImportError("no fastapi_offline")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_offline)
    h = Harness()
    h.register()
    c = TestClient(create_app(CoreBackend(h), api_token="s3cret"))
    r = c.get("/docs")
    assert r.status_code == 503 and "pip install fastapi-offline" in r.text
    assert "bearerAuth" in c.get("/openapi.json").json()["components"]["securitySchemes"]
    assert c.get("/health").status_code == 200
